"""Schema of the capture store, as sqlite-utils ``Migrations``.

One function per migration, named ``mNNN_verb_noun``, never edited once released: add a new one
instead (later analysis columns such as relation, pointer, thread, tokens go in new migrations
here). Tables are written as explicit SQL with comments, because Datasette shows a table's CREATE
statement to whoever opens the file.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxscope.inspector.store.derived.search import segment_key

if TYPE_CHECKING:
    import sqlite_utils
    from sqlite_utils.migrations import Migrations

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

MIGRATION_SET = "ctxscope"
Migration = Callable[["sqlite_utils.Database"], None]
_steps: list[Migration] = []


def migration(step: Migration) -> Migration:
    """Register the next migration. They are handed to sqlite-utils only when one must run or be
    listed (``migration_set``): the writer opens a current file without loading it
    (docs/architecture.md, "Memory")."""
    _steps.append(step)
    return step


@migration
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


@migration
def m002_create_calls(db: sqlite_utils.Database) -> None:
    db.execute(
        """
CREATE TABLE calls (
  id TEXT PRIMARY KEY,            -- time-ordered id assigned by the proxy
  session TEXT NOT NULL,          -- session_label, else "key:" + fingerprint prefix, else "anon"
  seq INTEGER NOT NULL,           -- 1-based position within the session
  capture_epoch INTEGER,          -- increments at every writer start: tells the first call after a restart
  provider TEXT, upstream TEXT, api TEXT, model TEXT,
  method TEXT, path TEXT, query TEXT,  -- query with secrets redacted
  status INTEGER, outcome TEXT, error TEXT,
  stream INTEGER,
  started_at TEXT, first_byte_at TEXT, ended_at TEXT,  -- ISO 8601 UTC, fixed width, sortable
  ttfb_ms REAL, duration_ms REAL,
  request_bytes INTEGER, response_bytes INTEGER,       -- raw sizes on the wire
  request_blob INTEGER REFERENCES blobs(id),           -- NULL for an empty body
  response_blob INTEGER REFERENCES blobs(id),
  final_response_blob INTEGER REFERENCES blobs(id),    -- the final response JSON, reassembled from a stream
  request_encoding TEXT, response_encoding TEXT,       -- Content-Encoding as sent
  request_recode TEXT, response_recode TEXT,           -- if set, the blob holds the decoded body and this
                                                       -- recipe recompresses it to the exact raw bytes
  request_decode_error TEXT, response_decode_error TEXT,
  request_content_type TEXT, response_content_type TEXT,
  request_headers TEXT,           -- JSON [[name, value], ...], secrets already redacted
  response_headers TEXT,          -- JSON [[name, value], ...]
  annotations TEXT,               -- JSON [[name, value], ...] from x-ctxscope-* request headers
  key_fingerprint TEXT, session_label TEXT, client TEXT,
  usage_input INTEGER,            -- total prompt tokens including cache reads and writes
  usage_output INTEGER, usage_cache_read INTEGER, usage_cache_write INTEGER,
  usage_raw TEXT,                 -- JSON: the provider's usage object as reported
  usage_semantics TEXT,           -- how the provider's own input count relates to caching
  request_json_ok INTEGER,        -- 1 parsed, 0 malformed, NULL empty or undecodable
  request_sha256 TEXT,            -- of the decoded request body: retry linkage
  response_complete INTEGER, stop_reason TEXT,
  response_error TEXT,            -- JSON error object from the provider (body or in-stream)
  event_count INTEGER,            -- SSE events in a streamed response
  parse_error TEXT,               -- the response parser failed: raw bytes are kept, analysis is partial
  attempt INTEGER NOT NULL DEFAULT 1,
  retry_of TEXT,                  -- the failed call this one repeats
  extra TEXT                      -- JSON: anything else the proxy recorded
)"""
    )
    # list_calls(session=...), next seq of a session, predecessor lookups.
    db.execute("CREATE INDEX idx_calls_session_seq ON calls (session, seq)")
    # list_calls() newest first, last capture time, retry window.
    db.execute("CREATE INDEX idx_calls_started_at ON calls (started_at)")
    # list_calls(model=...).
    db.execute("CREATE INDEX idx_calls_model ON calls (model, started_at)")
    # Retry linkage: the same request body in the same session shortly before.
    db.execute("CREATE INDEX idx_calls_retry ON calls (session, request_sha256, started_at)")


@migration
def m003_create_meta(db: sqlite_utils.Database) -> None:
    db.execute(
        """
CREATE TABLE meta (
  key TEXT PRIMARY KEY,           -- e.g. capture_epoch
  value TEXT
)"""
    )
    db.execute(
        """
CREATE TABLE store_events (
  id INTEGER PRIMARY KEY,
  at TEXT NOT NULL,               -- ISO 8601 UTC
  kind TEXT NOT NULL,             -- write_failed, dropped, analysis_failed, parse_failed, writer_started, ...
  call_id TEXT,                   -- the call concerned, when there is one
  count INTEGER NOT NULL DEFAULT 1,
  detail TEXT
)"""
    )
    # db_status: failure totals by kind.
    db.execute("CREATE INDEX idx_store_events_kind ON store_events (kind)")


# The inspector's analysis of each call (inspector/pipeline/analyze.py), recomputable with `ctxscope reindex`.
_ANALYSIS_COLUMNS = (
    ("session_source", "TEXT"),  # where `session` came from: label, header:<name>, metadata.user_id, ..., key, anon
    ("thread", "TEXT"),  # id of the first call of this call's thread (a chain of prompt continuations)
    ("parent_thread", "TEXT"),  # a side thread's parent: the session's main thread when the side thread began
    ("predecessor", "TEXT"),  # the earlier call whose prompt this one continues (longest shared prefix)
    ("relation", "TEXT"),  # IDENTICAL, APPEND_ONLY, DIVERGED, NOT_COMPARABLE, EPOCH_START
    ("pointer", "TEXT"),  # RFC 6901 pointer into this call's request body: the first difference
    ("epoch_reason", "TEXT"),  # with EPOCH_START: session_start, model_change, capture_resumed, ...
    ("relation_detail", "TEXT"),  # JSON {detail, shared_segments, marker_moves}
    ("tokens_estimated", "INTEGER"),  # o200k estimate of the whole prompt
    ("tokens_by_category", "TEXT"),  # JSON {system, tools, user_text, ..., reminder, image}
    ("cache_verdict", "TEXT"),  # hit, expected_write, client_break, ttl_expired, below_minimum, provider_miss, ...
    ("cache", "TEXT"),  # JSON: verdict, lost tokens/cost, break pointer, prediction, provider diagnostics
    ("cache_lost_tokens", "INTEGER"),  # tokens paid again because of this call's cache miss
    ("cache_lost_usd", "REAL"),  # what that cost beyond a cache read, USD (NULL: no price known)
    ("markers", "TEXT"),  # JSON [{kind, pointer, detail}]: reminders, compaction, retry, tools, declared ones
    ("has_compaction_before", "INTEGER"),  # 1 on the first call after a compaction
    ("response_id", "TEXT"),  # the provider's id of the response (resolves previous_response_id)
    ("analysis_version", "INTEGER"),  # NULL: never analysed
)


@migration
def m004_add_call_analysis(db: sqlite_utils.Database) -> None:
    for name, kind in _ANALYSIS_COLUMNS:
        db.execute(f"ALTER TABLE calls ADD COLUMN {name} {kind}")
    # Session timeline by thread; a thread's calls in order.
    db.execute("CREATE INDEX idx_calls_thread ON calls (thread, seq)")
    # `ctxscope calls --relation R` and stats by relation.
    db.execute("CREATE INDEX idx_calls_relation ON calls (relation, started_at)")
    # `ctxscope calls --verdict V` and stats by verdict.
    db.execute("CREATE INDEX idx_calls_cache_verdict ON calls (cache_verdict, started_at)")
    # previous_response_id -> the call that produced that response.
    db.execute("CREATE INDEX idx_calls_response_id ON calls (response_id)")
    # A call's successors (the UI's "next in thread", diffs against a later call).
    db.execute("CREATE INDEX idx_calls_predecessor ON calls (predecessor)")


@migration
def m005_add_grouped_by(db: sqlite_utils.Database) -> None:
    # Why the call landed in its session: label, header, metadata, prompt_cache_key, previous_response,
    # lineage, client_gap or new (docs/architecture.md, "Sessions and threads").
    db.execute("ALTER TABLE calls ADD COLUMN grouped_by TEXT")
    # Calls without a session id, per API key and client: where the next such call may continue.
    db.execute("CREATE INDEX idx_calls_key_client ON calls (key_fingerprint, client)")


@migration
def m006_create_cache_minimums(db: sqlite_utils.Database) -> None:
    db.execute(
        """
CREATE TABLE cache_minimums (
  family TEXT NOT NULL,           -- "anthropic" or "openai"
  model TEXT NOT NULL,            -- the model id as the client sent it
  learned_from TEXT NOT NULL,     -- the call whose reported usage showed it
  learned_at REAL NOT NULL,       -- that call's start (unix seconds): the minimum holds from then on
  tokens INTEGER NOT NULL,        -- o200k estimate of the prefix its provider cached, below the table's minimum
  PRIMARY KEY (family, model, learned_from)
)"""
    )


@migration
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


@migration
def m008_add_replay_of(db: sqlite_utils.Database) -> None:
    # The call a replay re-sent (`ctxscope replay`, the UI's replay button); NULL for captured traffic.
    db.execute("ALTER TABLE calls ADD COLUMN replay_of TEXT")
    # An original's replays.
    db.execute("CREATE INDEX idx_calls_replay_of ON calls (replay_of)")


@migration
def m009_create_export_positions(db: sqlite_utils.Database) -> None:
    # The order calls were stored in, numbered without reuse (AUTOINCREMENT): the OTLP export's
    # position is a number in it, so a call stored late (a long stream) or after a deletion is
    # never skipped (docs/architecture.md, "Export to OpenTelemetry").
    db.execute(
        """
CREATE TABLE stored_order (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- increases with every stored call, never reused
  call_id TEXT NOT NULL UNIQUE            -- the call stored
)"""
    )
    db.execute("INSERT INTO stored_order (call_id) SELECT id FROM calls ORDER BY rowid")
    db.execute(
        "CREATE TRIGGER stored_order_insert AFTER INSERT ON calls "
        "BEGIN INSERT INTO stored_order (call_id) VALUES (new.id); END"
    )
    db.execute(
        "CREATE TRIGGER stored_order_delete AFTER DELETE ON calls "
        "BEGIN DELETE FROM stored_order WHERE call_id = old.id; END"
    )
    db.execute(
        """
CREATE TABLE export_positions (
  target TEXT PRIMARY KEY,        -- the OTLP endpoint exported to
  seq INTEGER NOT NULL,           -- every stored call up to this stored_order.seq has been sent
  updated_at TEXT NOT NULL        -- ISO 8601 UTC of the last export that moved it
)"""
    )


@migration
def m010_index_unnamed_retries(db: sqlite_utils.Database) -> None:
    # A call without a session id that repeats a failed call's body joins its session: finding that
    # call must not scan every call of the same key and client (docs/architecture.md, "Sessions and threads").
    db.execute("CREATE INDEX idx_calls_request ON calls (request_sha256, key_fingerprint, client, started_at)")


@migration
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


@migration
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


def _segment_key(digest: str) -> bytes:
    """A segment's 16-byte key from the content hash the indexer gives (hex SHA-256, else any string)."""
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        raw = b""
    return raw[:16] if len(raw) >= 16 else hashlib.blake2b(digest.encode(), digest_size=16).digest()


@migration
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


@migration
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


@migration
def m015_drop_predecessor_index(db: sqlite_utils.Database) -> None:
    """No query looks a call up by its predecessor (a call's predecessor is read from its own row, by
    id), and every call's INSERT paid for the index: it goes (docs/architecture.md, "One INSERT per call")."""
    db.execute("DROP INDEX IF EXISTS idx_calls_predecessor")


@migration
def m016_stored_order_from_the_writer(db: sqlite_utils.Database) -> None:
    """``ingest`` numbers each call it inserts in ``stored_order`` itself: the trigger made every INSERT
    of a call a statement with a trigger, which journals each page it changes (docs/architecture.md,
    "One INSERT per call"). The trigger that deletes the number with its call stays."""
    db.execute("DROP TRIGGER IF EXISTS stored_order_insert")


@migration
def m017_same_request_by_time(db: sqlite_utils.Database) -> None:
    """The calls that sent the same body in a time window are found through the time index, which
    carries each call's request hash: an index keyed by the hash put every call's entry on a random
    page, which each commit wrote out again (~20 us per call at 60,000 calls), for a look-up made only
    after a failure (docs/architecture.md, "One INSERT per call")."""
    db.execute("DROP INDEX IF EXISTS idx_calls_request")
    db.execute("DROP INDEX IF EXISTS idx_calls_started_at")
    db.execute("CREATE INDEX idx_calls_started_at ON calls (started_at, request_sha256)")


@migration
def m018_create_call_findings(db: sqlite_utils.Database) -> None:
    """Each call's findings facts, taken by the writer as it stores the call, so a session's findings
    are assembled without reading a body (docs/architecture.md, "Findings"). A store older than the
    table gets them the first time a session's findings are read."""
    db.execute(
        """
CREATE TABLE call_findings (
  call_id TEXT PRIMARY KEY REFERENCES calls(id),  -- goes with its call (store/deletion.py)
  facts TEXT NOT NULL                             -- JSON, inspector/advisor/call_facts.py
) WITHOUT ROWID"""
    )


@migration
def m019_create_call_shapes(db: sqlite_utils.Database) -> None:
    """Each call's prompt shape (segment hashes, tokens, breakpoints; no text), taken by the writer
    beside its findings facts, so ``advise`` replays a session without reading a body
    (docs/architecture.md, "The cache advisor"). A store older than the table gets them the first
    time a session is advised."""
    db.execute(
        """
CREATE TABLE call_shapes (
  call_id TEXT PRIMARY KEY REFERENCES calls(id),  -- goes with its call (store/deletion.py)
  shape TEXT NOT NULL                             -- JSON, inspector/advisor/shape.py
) WITHOUT ROWID"""
    )


@migration
def m020_create_call_totals(db: sqlite_utils.Database) -> None:
    """Per-session totals the writer keeps with each call, counted here once for the calls already
    stored, so the whole-store reads (sessions, stats, db status) read a few rows per session and
    never scan the calls (store/totals.py, docs/architecture.md, "Totals per session")."""
    from ctxscope.inspector.store import totals

    totals.create(db)


@migration
def m021_create_session_titles(db: sqlite_utils.Database) -> None:
    """Each session's title, written by the writer as it stores the session's first calls, so no read
    opens a body to name a session (store/derived/titles.py). The sessions already stored are named
    by the pipeline's backfill (it reads their first bodies once): the meta row marks it due."""
    from ctxscope.inspector.store.derived import titles

    db.execute(titles.CREATE)
    if db.execute("SELECT 1 FROM calls LIMIT 1").fetchone() is not None:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", [titles.PENDING])


NAMES = tuple(step.__name__ for step in _steps)  # in order: what a current file has applied
_built: list[Migrations] = []


def migration_set() -> Migrations:
    """The migrations as sqlite-utils' ``Migrations`` (which imports sqlite-utils), made once."""
    if not _built:
        from sqlite_utils.migrations import Migrations

        built = Migrations(MIGRATION_SET)
        for step in _steps:
            built()(step)
        _built.append(built)
    return _built[0]


def __getattr__(name: str) -> Migrations:
    """``migrations``: the same, made on first use."""
    if name == "migrations":
        return migration_set()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
