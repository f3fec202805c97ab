"""The store's migrations of the ``calls`` table: its columns, the analysis's, and its indexes.

Part of the one ordered list in ``migrations/__init__.py``; never edited once released. Each index
says which query it serves; an index that costs every INSERT more than its rare query saves goes
(docs/architecture.md, "One INSERT per call").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils


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


def m005_add_grouped_by(db: sqlite_utils.Database) -> None:
    # Why the call landed in its session: label, header, metadata, prompt_cache_key, previous_response,
    # lineage, client_gap or new (docs/architecture.md, "Sessions and threads").
    db.execute("ALTER TABLE calls ADD COLUMN grouped_by TEXT")
    # Calls without a session id, per API key and client: where the next such call may continue.
    db.execute("CREATE INDEX idx_calls_key_client ON calls (key_fingerprint, client)")


def m008_add_replay_of(db: sqlite_utils.Database) -> None:
    # The call a replay re-sent (`ctxscope replay`, the UI's replay button); NULL for captured traffic.
    db.execute("ALTER TABLE calls ADD COLUMN replay_of TEXT")
    # An original's replays.
    db.execute("CREATE INDEX idx_calls_replay_of ON calls (replay_of)")


def m010_index_unnamed_retries(db: sqlite_utils.Database) -> None:
    # A call without a session id that repeats a failed call's body joins its session: finding that
    # call must not scan every call of the same key and client (docs/architecture.md, "Sessions and threads").
    db.execute("CREATE INDEX idx_calls_request ON calls (request_sha256, key_fingerprint, client, started_at)")


def m015_drop_predecessor_index(db: sqlite_utils.Database) -> None:
    """No query looks a call up by its predecessor (a call's predecessor is read from its own row, by
    id), and every call's INSERT paid for the index: it goes (docs/architecture.md, "One INSERT per call")."""
    db.execute("DROP INDEX IF EXISTS idx_calls_predecessor")


def m017_same_request_by_time(db: sqlite_utils.Database) -> None:
    """The calls that sent the same body in a time window are found through the time index, which
    carries each call's request hash: an index keyed by the hash put every call's entry on a random
    page, which each commit wrote out again (~20 us per call at 60,000 calls), for a look-up made only
    after a failure (docs/architecture.md, "One INSERT per call")."""
    db.execute("DROP INDEX IF EXISTS idx_calls_request")
    db.execute("DROP INDEX IF EXISTS idx_calls_started_at")
    db.execute("CREATE INDEX idx_calls_started_at ON calls (started_at, request_sha256)")
