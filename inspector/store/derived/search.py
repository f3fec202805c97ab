"""The search index's SQL: distinct segments, where each session first holds them, FTS5 queries.

A segment's text is stored once (zstd-compressed with the chunks' dictionary, under a 16-byte
key), whatever the number of calls that re-send it; each session records only the first call (and
JSON Pointer) that holds it. So the index grows with new content, not with calls x context
(docs/architecture.md, "The search index"). FTS5 reads the texts through the view ``search_text``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlite_utils

from ctxscope.inspector.store.blobs import compress_text
from ctxscope.vocab.kinds import SearchArea

AREAS = tuple(SearchArea)
HIT_START, HIT_END = "\x02", "\x03"  # around matched words in a snippet: never in JSON text we show


@dataclass(frozen=True)
class Piece:
    """One searchable text of a call: a prompt segment or a text of the response."""

    hash: str
    area: str  # a SearchArea
    body: str  # "request" or "response"
    pointer: str
    text: str


def segment_key(text: str) -> bytes:
    """A segment's key: 16 bytes of its text's hash, whatever area it is in, so an answer's text that
    comes back as an assistant message of the next prompt is stored once, under the area it came first."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def call_session(db: sqlite_utils.Database, call_id: str) -> str | None:
    row = db.execute("SELECT session FROM calls WHERE id = ?", [call_id]).fetchone()
    return row[0] if row else None


def add_pieces(db: sqlite_utils.Database, call_id: str, session: str, pieces: Sequence[Piece]) -> int:
    """Index a call's pieces (inside the caller's transaction); returns how many were new to the session."""
    if not pieces:
        return 0
    keys = [segment_key(p.text) for p in pieces]
    known = {k for k in keys if db.execute("SELECT 1 FROM search_segments WHERE hash = ?", [k]).fetchone()}
    fresh = {k: p for k, p in zip(keys, pieces, strict=True) if k not in known}
    db.conn.executemany(
        "INSERT OR IGNORE INTO search_segments (hash, area, dict, data) VALUES (?, ?, ?, ?)",
        [(k, p.area, *compress_text(db, p.text)) for k, p in fresh.items()],
    )
    before = db.conn.total_changes
    db.conn.executemany(
        """INSERT OR IGNORE INTO search_occurrences (segment, session, call_id, body, pointer)
           SELECT id, ?, ?, ?, ? FROM search_segments WHERE hash = ?""",
        [(session, call_id, p.body, p.pointer, k) for k, p in zip(keys, pieces, strict=True)],
    )
    return db.conn.total_changes - before


def clear(db: sqlite_utils.Database, session: str | None = None) -> None:
    """Forget the index (of one session): the segments no session holds go with it (a trigger)."""
    if session is None:
        db.execute("DELETE FROM search_occurrences")
    else:
        db.execute("DELETE FROM search_occurrences WHERE session = ?", [session])


_TOKEN = re.compile(r"[^\W_]+")  # what FTS5's unicode61 tokenizer takes for a token: letters and digits


def _fold(text: str) -> str:
    """Lower case without diacritics, as unicode61 compares tokens."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(_fold(text))


def phrase(text: str) -> str:
    """The user's words as FTS5 terms that must all occur: each token quoted, no query syntax. The
    index keeps no positions (detail=none), so the phrase itself is checked on the text (``_holds``)."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in tokens(text))


def _holds(text: str, words: list[str]) -> bool:
    """Whether ``words`` occur one after the other in ``text``."""
    found = tokens(text)
    n = len(words)
    first = words[0]
    return any(found[i : i + n] == words for i, t in enumerate(found) if t == first)


def _merge_marks(snippet: str | None) -> str | None:
    """One mark around words matched next to each other (the phrase), not one per word."""
    if snippet is None:
        return None
    return re.sub(re.escape(HIT_END) + r"([\W_]*?)" + re.escape(HIT_START), r"\1", snippet)


def search(
    db: sqlite_utils.Database,
    text: str,
    *,
    session: str | None = None,
    areas: Iterable[str] = (),
    limit: int = 50,
    snippet_tokens: int = 16,
) -> list[dict]:
    """Hits, best first: session, call, seq, body, pointer, area and a snippet (matches between
    HIT_START and HIT_END). Every word must match; several words must also stand together."""
    words = tokens(text)
    if not words:
        return []
    where = ["search_fts MATCH ?"]
    params: list[object] = [HIT_START, HIT_END, snippet_tokens, phrase(text)]
    if session is not None:
        where.append("o.session = ?")
        params.append(session)
    areas = list(areas)
    if areas:
        where.append(f"s.area IN ({', '.join('?' for _ in areas)})")
        params += areas
    sql = f"""SELECT o.session AS session, o.call_id AS call, c.seq AS seq, c.started_at AS started_at,
                     c.model AS model, o.body AS body, o.pointer AS pointer, s.area AS area,
                     snippet(search_fts, 0, ?, ?, '…', ?) AS snippet, s.id AS segment
              FROM search_fts
              JOIN search_segments s ON s.id = search_fts.rowid
              JOIN search_occurrences o ON o.segment = s.id
              JOIN calls c ON c.id = o.call_id
              WHERE {" AND ".join(where)}
              ORDER BY search_fts.rank, c.started_at, o.call_id"""
    out: list[dict] = []
    checked: dict[int, bool] = {}
    for row in db.query(sql, params):
        seg = row.pop("segment")
        if len(words) > 1:
            if seg not in checked:
                found = db.execute("SELECT ctxscope_text(data, dict) FROM search_segments WHERE id = ?", [seg])
                checked[seg] = _holds(found.fetchone()[0] or "", words)
            if not checked[seg]:
                continue
        row["snippet"] = _merge_marks(row["snippet"])
        out.append(row)
        if len(out) >= limit:
            break
    return out


def index_stats(db: sqlite_utils.Database) -> dict:
    """Rows and bytes of the index's tables (bytes from dbstat when SQLite has it)."""
    one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    out: dict = {
        "segments": one("SELECT COUNT(*) FROM search_segments"),
        "occurrences": one("SELECT COUNT(*) FROM search_occurrences"),
        "text_bytes": one("SELECT COALESCE(SUM(length(CAST(text AS BLOB))), 0) FROM search_text"),
    }
    try:
        rows = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except Exception:  # dbstat is a compile-time option
        return out
    sizes = dict(rows)
    ours = ("search_", "idx_search_", "sqlite_autoindex_search_")
    out["index_bytes"] = sum(v for k, v in sizes.items() if k.startswith(ours))
    out["store_bytes"] = sum(sizes.values())
    return out
