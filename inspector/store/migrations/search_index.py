"""The store's migrations of the full-text search index (docs/architecture.md, "The search index").

Part of the one ordered list in ``migrations/__init__.py``; never edited once released. The index
went from a copy of every segment's text, to that text compressed, to no copy: the text is read
back from a body that holds it.
"""

from __future__ import annotations

import hashlib
import sys
from typing import TYPE_CHECKING

from ctxscope.inspector.store.derived.search import segment_key

if TYPE_CHECKING:
    import sqlite_utils

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd


def m007_create_search_index(db: sqlite_utils.Database) -> None:
    """Full-text search over prompt and response text: each distinct segment once (store/search.py)."""
    db.execute(
        """
CREATE TABLE search_segments (
  id INTEGER PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,      -- the segment's content hash: a text seen again is not stored again
  area TEXT NOT NULL,             -- system, tools, messages, tool_results, responses
  text TEXT NOT NULL              -- what is searched and shown in snippets
)"""
    )
    db.execute(
        """
CREATE TABLE search_occurrences (
  segment INTEGER NOT NULL REFERENCES search_segments(id),
  session TEXT NOT NULL,
  call_id TEXT NOT NULL REFERENCES calls(id),  -- the session's first call that holds the segment
  body TEXT NOT NULL,             -- request or response
  pointer TEXT NOT NULL,          -- RFC 6901 pointer into that body (the final response for a stream)
  PRIMARY KEY (segment, session)
) WITHOUT ROWID"""
    )
    # Deleting a session deletes the occurrences of its calls (they reference calls).
    db.execute("CREATE INDEX idx_search_occurrences_call ON search_occurrences (call_id)")
    db.execute("CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_segments', content_rowid='id')")
    db.execute(
        """
CREATE TRIGGER search_segments_ai AFTER INSERT ON search_segments BEGIN
  INSERT INTO search_fts (rowid, text) VALUES (new.id, new.text);
END"""
    )
    db.execute(
        """
CREATE TRIGGER search_segments_ad AFTER DELETE ON search_segments BEGIN
  INSERT INTO search_fts (search_fts, rowid, text) VALUES ('delete', old.id, old.text);
END"""
    )
    # A text no session holds any more leaves the file with its last occurrence.
    db.execute(
        """
CREATE TRIGGER search_occurrences_ad AFTER DELETE ON search_occurrences
WHEN NOT EXISTS (SELECT 1 FROM search_occurrences WHERE segment = old.segment) BEGIN
  DELETE FROM search_segments WHERE id = old.segment;
END"""
    )


def _segment_key(digest: str) -> bytes:
    """A segment's 16-byte key from the content hash the indexer gives (hex SHA-256, else any string)."""
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        raw = b""
    return raw[:16] if len(raw) >= 16 else hashlib.blake2b(digest.encode(), digest_size=16).digest()


def m013_compress_search_text(db: sqlite_utils.Database) -> None:
    """Search segments keep their text zstd-compressed under a 16-byte key; FTS5 reads it through a view
    and keeps no positions.

    The view calls ``ctxscope_text`` (store/db.py registers it on every connection): FTS5 needs the
    text for snippets and to delete a segment's terms (docs/architecture.md, "The search index").
    """
    old = db.execute("SELECT id, hash, area, text FROM search_segments").fetchall()
    for name in ("search_segments_ai", "search_segments_ad", "search_occurrences_ad"):
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DROP TABLE search_fts")
    db.execute("DROP INDEX idx_search_occurrences_call")  # deleting a session scans the occurrences instead
    db.execute("ALTER TABLE search_segments RENAME TO search_segments_old")
    db.execute(
        """
CREATE TABLE search_segments (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,      -- 16 bytes of the segment's content hash: a text seen again is not stored again
  area TEXT NOT NULL,             -- system, tools, messages, tool_results, responses
  dict INTEGER REFERENCES zstd_dicts(id),  -- the dictionary data was compressed with, NULL for none
  data BLOB NOT NULL              -- zstd of the text that is searched and shown in snippets
)"""
    )
    db.conn.executemany(
        "INSERT INTO search_segments (id, hash, area, data) VALUES (?, ?, ?, ?)",
        [(i, _segment_key(h), a, zstd.compress(t.encode(), 3)) for i, h, a, t in old],
    )
    db.execute("DROP TABLE search_segments_old")
    db.execute("CREATE VIEW search_text AS SELECT id, ctxscope_text(data, dict) AS text FROM search_segments")
    # detail=none: the index records which segments hold a word, not where (a third of its size);
    # a phrase is checked on the text of each candidate (store/derived/search.py).
    db.execute(
        "CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_text', content_rowid='id', detail=none)"
    )
    db.execute("INSERT INTO search_fts (search_fts) VALUES ('rebuild')")
    # Merge segment b-trees two at a time (the default waits for four): the same terms are kept in
    # fewer places, a smaller index for a little more work per insert.
    db.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('automerge', 2)")
    db.execute(
        """
CREATE TRIGGER search_segments_ai AFTER INSERT ON search_segments BEGIN
  INSERT INTO search_fts (rowid, text) VALUES (new.id, ctxscope_text(new.data, new.dict));
END"""
    )
    db.execute(
        """
CREATE TRIGGER search_segments_ad AFTER DELETE ON search_segments BEGIN
  INSERT INTO search_fts (search_fts, rowid, text) VALUES ('delete', old.id, ctxscope_text(old.data, old.dict));
END"""
    )
    db.execute(
        """
CREATE TRIGGER search_occurrences_ad AFTER DELETE ON search_occurrences
WHEN NOT EXISTS (SELECT 1 FROM search_occurrences WHERE segment = old.segment) BEGIN
  DELETE FROM search_segments WHERE id = old.segment;
END"""
    )


def m014_search_text_from_bodies(db: sqlite_utils.Database) -> None:
    """Search segments stop holding a copy of their text: it is read back from a body that holds it.

    The view ``search_text`` now calls ``ctxscope_segment_text(id)`` (store/db.py); the FTS5 index
    keeps the terms it has (the texts are the same). The triggers go: the writer gives FTS5 the
    text it has in hand, and ``store/derived/search.py`` tells FTS5 the old text before a segment's
    last occurrence goes (docs/architecture.md, "The search index").
    """
    for name in ("search_segments_ai", "search_segments_ad", "search_occurrences_ad"):
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    # A new table rather than DROP COLUMN: SQLite cannot drop a last column followed by a comment.
    db.execute(
        """
CREATE TABLE search_segments_new (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,      -- 16 bytes of the segment's content hash: a text seen again is not recorded again
  area TEXT NOT NULL,             -- system, tools, messages, tool_results, responses
  size INTEGER NOT NULL           -- the text's length in characters: the shortest match ranks first
)"""
    )
    # Segments indexed before m013 are keyed by the indexer's hash; the text is read back and checked
    # against its own key now, so each gets that key (one text under two keys becomes one segment).
    kept: dict[bytes, int] = {}
    for seg, area, text in db.execute(
        "SELECT id, area, ctxscope_text(data, dict) FROM search_segments ORDER BY id"
    ).fetchall():
        key = segment_key(text)
        if key not in kept:
            kept[key] = seg
            db.execute(
                "INSERT INTO search_segments_new (id, hash, area, size) VALUES (?, ?, ?, ?)",
                [seg, key, area, len(text)],
            )
            continue
        db.execute("UPDATE OR IGNORE search_occurrences SET segment = ? WHERE segment = ?", [kept[key], seg])
        db.execute("DELETE FROM search_occurrences WHERE segment = ?", [seg])
        db.execute("INSERT INTO search_fts (search_fts, rowid, text) VALUES ('delete', ?, ?)", [seg, text])
    db.execute("DROP VIEW search_text")
    db.execute("DROP TABLE search_segments")
    db.execute("ALTER TABLE search_segments_new RENAME TO search_segments")
    db.execute("CREATE VIEW search_text AS SELECT id, ctxscope_segment_text(id) AS text FROM search_segments")
