"""The search index's SQL: distinct segments, where each session first holds them, FTS5 queries.

A segment is recorded once (under a 16-byte key of its text), whatever the number of calls that
re-send it; each session records only the first call (and JSON Pointer) that holds it. The text
itself is not stored a second time: it is read back from a body that holds it, through the view
``search_text`` (``ctxscope_segment_text``, store/db.py). FTS5 is fed the text the writer has in
hand, and told the old text before a segment goes (docs/architecture.md, "The search index").
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ctxscope.inspector.store.layout.known import KnownIds
from ctxscope.vocab.kinds import SearchArea

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

log = logging.getLogger("ctxscope.search")

AREAS = tuple(SearchArea)
HIT_START, HIT_END = "\x02", "\x03"  # around matched words in a snippet: never in JSON text we show


@dataclass(frozen=True)
class Piece:
    """One searchable text of a call: a prompt segment or a text of the response (keyed by
    ``segment_key`` of its text)."""

    area: SearchArea
    body: Literal["request", "response"]
    pointer: str
    text: str


def segment_key(text: str) -> bytes:
    """A segment's key: 16 bytes of its text's hash, whatever area it is in, so an answer's text that
    comes back as an assistant message of the next prompt is stored once, under the area it came first."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def call_session(db: Db, call_id: str) -> str | None:
    row = db.execute("SELECT session FROM calls WHERE id = ?", [call_id]).fetchone()
    return row[0] if row else None


def add_pieces(db: Db, call_id: str, session: str, pieces: Sequence[Piece], known: KnownIds | None = None) -> int:
    """Index a call's pieces (inside the caller's transaction); returns how many were new to the session.

    A text new to the store gets a segment row (key and area, no text) and its FTS5 terms from the
    text in hand; nothing reads it back here. ``known``: the writer's segment ids, asked before the
    store and told the new ones once the call's rows are all written."""
    if not pieces:
        return 0
    keys = [segment_key(p.text) for p in pieces]
    ids: dict[bytes, int] = {}
    for k, p in zip(keys, pieces, strict=True):
        if k in ids:
            continue
        found = known.segments.get(k) if known is not None else None
        if found is not None:
            ids[k] = found
            continue
        # Asked in the writer's known ids first, a segment is mostly new: it is inserted at once, and
        # looked up only when the store had it already (one statement per new segment, not two).
        cur = db.conn.execute(
            "INSERT INTO search_segments (hash, area, size) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
            [k, p.area, len(p.text)],
        )
        if cur.rowcount != 1:  # stored already: its id (its terms are in FTS5)
            ids[k] = db.conn.execute("SELECT id FROM search_segments WHERE hash = ?", [k]).fetchone()[0]
            continue
        new_id = cur.lastrowid
        assert new_id is not None  # an INSERT sets it
        if known is not None and known.defer_terms:
            known.terms.append((new_id, p.text))
        else:
            db.conn.execute("INSERT INTO search_fts (rowid, text) VALUES (?, ?)", [new_id, p.text])
        ids[k] = new_id
    rows = [(ids[k], session, call_id, p.body, p.pointer) for k, p in zip(keys, pieces, strict=True)]
    if known is not None:
        for k, segment in ids.items():
            known.keep(known.segments, k, segment)
        # The session holds these already: INSERT OR IGNORE would leave them as they are.
        rows = [r for r in rows if (r[0], session) not in known.occurrences]
    if not rows:
        return 0
    before = db.conn.total_changes
    db.conn.executemany(
        "INSERT OR IGNORE INTO search_occurrences (segment, session, call_id, body, pointer) VALUES (?, ?, ?, ?, ?)",
        rows,
    )
    if known is not None:
        for r in rows:
            known.keep(known.occurrences, (r[0], session), 1)
    return db.conn.total_changes - before


def flush_terms(db: Db, known: KnownIds) -> None:
    """Give FTS5 the texts ``add_pieces`` held back, all at once, before the transaction commits: one
    FTS5 index segment per batch, not one per call (docs/architecture.md, "The search index")."""
    if known.terms:
        db.conn.executemany("INSERT INTO search_fts (rowid, text) VALUES (?, ?)", known.terms)
        known.terms.clear()


def occurrence_of(db: Db, segment: int) -> tuple[bytes, str, str | None, str, str] | None:
    """Where a segment's text can be read back: (key, call id, the call's api, body, pointer) of one of
    its occurrences (the earliest call's), None when no session holds it."""
    row = db.execute(
        """SELECT s.hash, o.call_id, c.api, o.body, o.pointer
           FROM search_occurrences o JOIN search_segments s ON s.id = o.segment JOIN calls c ON c.id = o.call_id
           WHERE o.segment = ? ORDER BY c.rowid LIMIT 1""",
        [segment],
    ).fetchone()
    return (row[0], row[1], row[2], row[3], row[4]) if row is not None else None


def clear(db: Db, session: str | None = None) -> None:
    """Forget the index (of one session), while the session's bodies are still stored.

    The segments only this session holds leave FTS5 with their text, read back from its bodies
    first (an external-content index must be told the terms it deletes); the segments another
    session holds stay, and are read back from that session's occurrence from then on. A text
    that cannot be read back any more keeps its (text-less) segment row, so its id is never
    given to another text whose terms would then mix with its own; a full ``reindex`` clears it."""
    if session is None:
        db.execute("INSERT INTO search_fts (search_fts) VALUES ('delete-all')")
        db.execute("DELETE FROM search_occurrences")
        db.execute("DELETE FROM search_segments")
        return
    only_here = [
        r[0]
        for r in db.execute(
            """SELECT o.segment FROM search_occurrences o WHERE o.session = ? AND NOT EXISTS
               (SELECT 1 FROM search_occurrences p WHERE p.segment = o.segment AND p.session != ?)
               ORDER BY o.segment""",  # in the order they were indexed: a body's texts are split once
            [session, session],
        ).fetchall()
    ]
    gone: list[int] = []
    for seg in only_here:
        try:
            text = db.execute("SELECT text FROM search_text WHERE id = ?", [seg]).fetchone()[0]
        except Exception as e:  # a body that no longer reads back: its terms stay, harmless
            log.warning("search segment %s: text not readable (%s); kept out of results", seg, e)
            text = None
        if text is not None:
            db.execute("INSERT INTO search_fts (search_fts, rowid, text) VALUES ('delete', ?, ?)", [seg, text])
            gone.append(seg)
    db.execute("DELETE FROM search_occurrences WHERE session = ?", [session])
    for i in range(0, len(gone), 500):
        batch = gone[i : i + 500]
        db.execute(f"DELETE FROM search_segments WHERE id IN ({','.join('?' * len(batch))})", batch)


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
    db: Db,
    text: str,
    *,
    session: str | None = None,
    areas: Iterable[str] = (),
    limit: int = 50,
    snippet_tokens: int = 16,
) -> list[dict[str, Any]]:
    """Hits, best first: session, call, seq, body, pointer, area and a snippet (matches between
    HIT_START and HIT_END). Every word must match; several words must also stand together."""
    words = tokens(text)
    if not words:
        return []
    match = phrase(text)
    where, params = ["search_fts MATCH ?"], [match]
    if session is not None:
        where.append("EXISTS (SELECT 1 FROM search_occurrences o WHERE o.segment = s.id AND o.session = ?)")
        params.append(session)
    areas = list(areas)
    if areas:
        where.append(f"s.area IN ({', '.join('?' for _ in areas)})")
        params += areas
    # The matching segments, shortest first: the shortest segment ranks first, which is FTS5's bm25
    # with each word counted once (the index keeps no counts, and bm25 itself would read every
    # match's text). Their occurrences are read a few segments at a time, as far as ``limit`` needs:
    # a word in every session's system prompt is not joined to every call that holds it
    # (docs/architecture.md, "The search index").
    segments = db.execute(
        f"""SELECT s.id, s.size FROM search_fts JOIN search_segments s ON s.id = search_fts.rowid
            WHERE {" AND ".join(where)} ORDER BY s.size, s.id""",
        params,
    )
    snippet_sql = "SELECT snippet(search_fts, 0, ?, ?, '…', ?) FROM search_fts WHERE search_fts MATCH ? AND rowid = ?"
    out: list[dict[str, Any]] = []
    same_size: list[int] = []
    size = None
    for seg, seg_size in [*segments, (None, None)]:  # a last empty one ends the last group
        if seg_size != size and same_size:
            out += _occurrences(db, same_size, words, session, limit - len(out))
            same_size = []
            if len(out) >= limit:
                break
        size = seg_size
        if seg is not None:
            same_size.append(seg)
    snippets: dict[int, str | None] = {}
    for row in out:  # the snippet is made for the hits kept only
        seg = row.pop("segment")
        if seg not in snippets:
            found = db.execute(snippet_sql, [HIT_START, HIT_END, snippet_tokens, match, seg]).fetchone()
            snippets[seg] = _merge_marks(found[0] if found else None)
        row["snippet"] = snippets[seg]
    return out


def _occurrences(
    db: Db, segments: list[int], words: list[str], session: str | None, limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` occurrences of ``segments`` (all of one size) by time, of those whose text
    holds ``words`` one after the other (a text is read back only for a phrase of several words)."""
    if len(words) > 1:
        held = []
        for seg in segments:
            found = db.execute("SELECT text FROM search_text WHERE id = ?", [seg]).fetchone()
            if _holds((found[0] if found else None) or "", words):
                held.append(seg)
        segments = held
    if not segments:
        return []
    marks = ", ".join("?" for _ in segments)
    own, params = ("AND o.session = ?", [session]) if session is not None else ("", [])
    return list(
        db.query(
            f"""SELECT o.session AS session, o.call_id AS call, c.seq AS seq, c.started_at AS started_at,
                       c.model AS model, o.body AS body, o.pointer AS pointer, s.area AS area, s.id AS segment
                FROM search_occurrences o
                JOIN search_segments s ON s.id = o.segment
                JOIN calls c ON c.id = o.call_id
                WHERE o.segment IN ({marks}) {own}
                ORDER BY c.started_at, o.call_id LIMIT ?""",
            [*segments, *params, limit],
        )
    )


def index_stats(db: Db, *, text_bytes: bool = False) -> dict[str, Any]:
    """Rows and bytes of the index's tables (bytes from dbstat when SQLite has it); with ``text_bytes``,
    the bytes of the texts indexed (each read back from its body: a pass over the store)."""

    def one(sql: str) -> Any:
        return db.execute(sql).fetchone()[0]

    out: dict[str, Any] = {
        "segments": one("SELECT COUNT(*) FROM search_segments"),
        "occurrences": one("SELECT COUNT(*) FROM search_occurrences"),
    }
    if text_bytes:
        out["text_bytes"] = one("SELECT COALESCE(SUM(length(CAST(text AS BLOB))), 0) FROM search_text")
    try:
        rows = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except Exception:  # dbstat is a compile-time option
        return out
    sizes = dict(rows)
    ours = ("search_", "idx_search_", "sqlite_autoindex_search_")
    out["index_bytes"] = sum(v for k, v in sizes.items() if k.startswith(ours))
    out["store_bytes"] = sum(sizes.values())
    return out
