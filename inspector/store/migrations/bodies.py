"""The store's migrations of where bodies and headers are kept: blobs, then chunks, pages and header sets.

Part of the one ordered list in ``migrations/__init__.py``; never edited once released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils


def m001_create_blobs(db: sqlite_utils.Database) -> None:
    db.execute(
        """
CREATE TABLE blobs (
  id INTEGER PRIMARY KEY,
  sha256 TEXT NOT NULL,           -- of the full content: verified on every read, used to deduplicate
  size INTEGER NOT NULL,          -- length of the full content
  base INTEGER REFERENCES blobs(id), -- NULL for a keyframe, else the blob this is a delta against
  depth INTEGER NOT NULL,         -- 0 for a keyframe, base depth + 1 for a delta
  prefix_len INTEGER NOT NULL,    -- bytes shared with the start of the base
  suffix_len INTEGER NOT NULL,    -- bytes shared with the end of the base
  data BLOB NOT NULL              -- zstd of the whole content (keyframe) or of the middle (delta)
)"""
    )
    # blob_put: deduplicate identical bodies (retries, repeated count_tokens).
    db.execute("CREATE INDEX idx_blobs_sha256 ON blobs (sha256)")


def m011_create_chunks(db: sqlite_utils.Database) -> None:
    """Bodies as pieces of content-addressed chunks (store/blobs.py); rows stored before stay as they are."""
    db.execute(
        """
CREATE TABLE zstd_dicts (
  id INTEGER PRIMARY KEY,         -- random, never reused: a reader may cache a dictionary by its id
  after_chunk INTEGER NOT NULL,   -- trained once this chunk was stored: the newest compresses new chunks
  data BLOB NOT NULL              -- a zstd dictionary trained on the chunks stored before it
)"""
    )
    db.execute(
        """
CREATE TABLE chunks (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,      -- the first 16 bytes of SHA-256 of the raw bytes: the same bytes are stored once
  dict INTEGER REFERENCES zstd_dicts(id),  -- the dictionary it was compressed with, NULL for none
  data BLOB NOT NULL              -- zstd of the raw bytes
)"""
    )
    db.execute(
        """
CREATE TABLE pages (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,      -- the same of pieces: bodies that share their first pieces share pages
  pieces BLOB NOT NULL            -- 16 pieces, each (chunk id, offset, length) as three unsigned LEB128 varints
)"""
    )
    # A body stored as pieces has hash set (sha256 '', data x'', the delta columns 0): its pieces are
    # the pieces of its pages in order, then tail.
    db.execute("ALTER TABLE blobs ADD COLUMN hash BLOB")  # the same of the body: verified on every read
    db.execute("ALTER TABLE blobs ADD COLUMN pages BLOB")  # page ids as unsigned LEB128 varints
    db.execute("ALTER TABLE blobs ADD COLUMN tail BLOB")  # the pieces after the last full page
    # A body is no longer looked up by its hash: the same body again is laid out on its predecessor
    # and shares all its chunks and pages, for a row of a few bytes (an index would cost more).
    db.execute("DROP INDEX idx_blobs_sha256")


def m012_create_header_sets(db: sqlite_utils.Database) -> None:
    """Header lists stored once (store/layout/headers.py); rows stored before keep their own lists."""
    db.execute(
        """
CREATE TABLE header_sets (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,      -- BLAKE2b-128 of pairs
  pairs TEXT NOT NULL             -- JSON [[name, value], ...], null where a volatile value was
)"""
    )
    # A call stored from now on has request_headers and response_headers NULL and these instead.
    db.execute("ALTER TABLE calls ADD COLUMN request_header_set INTEGER REFERENCES header_sets(id)")
    db.execute("ALTER TABLE calls ADD COLUMN response_header_set INTEGER REFERENCES header_sets(id)")
    db.execute("ALTER TABLE calls ADD COLUMN header_values TEXT")  # JSON [[request values], [response values]]
    # Retry linkage and the unnamed-call lookup both look for the same body in a time window: one
    # index on (hash, time) serves both (the session, key and client are filters on the few rows
    # in the window), where two indexes repeated the session, key and client in every entry.
    db.execute("DROP INDEX idx_calls_retry")
    db.execute("DROP INDEX idx_calls_request")
    db.execute("CREATE INDEX idx_calls_request ON calls (request_sha256, started_at)")
    # Replays are rare: index only the calls that are one.
    db.execute("DROP INDEX idx_calls_replay_of")
    db.execute("CREATE INDEX idx_calls_replay_of ON calls (replay_of) WHERE replay_of IS NOT NULL")
