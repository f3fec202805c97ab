"""The store's migrations of the tables beside the calls: meta and events, learned cache minimums,
the stored order and export positions, and the facts, shapes and totals the writer keeps per call.

Part of the one ordered list in ``migrations/__init__.py``; never edited once released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils


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


def m016_stored_order_from_the_writer(db: sqlite_utils.Database) -> None:
    """``ingest`` numbers each call it inserts in ``stored_order`` itself: the trigger made every INSERT
    of a call a statement with a trigger, which journals each page it changes (docs/architecture.md,
    "One INSERT per call"). The trigger that deletes the number with its call stays."""
    db.execute("DROP TRIGGER IF EXISTS stored_order_insert")


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


def m020_create_call_totals(db: sqlite_utils.Database) -> None:
    """Per-session totals the writer keeps with each call, counted here once for the calls already
    stored, so the whole-store reads (sessions, stats, db status) read a few rows per session and
    never scan the calls (store/totals.py, docs/architecture.md, "Totals per session")."""
    from ctxscope.inspector.store import totals

    totals.create(db)


def m021_create_session_titles(db: sqlite_utils.Database) -> None:
    """Each session's title, written by the writer as it stores the session's first calls, so no read
    opens a body to name a session (store/derived/titles.py). The sessions already stored are named
    by the pipeline's backfill (it reads their first bodies once): the meta row marks it due."""
    from ctxscope.inspector.store.derived import titles

    db.execute(titles.CREATE)
    if db.execute("SELECT 1 FROM calls LIMIT 1").fetchone() is not None:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", [titles.PENDING])
