"""Opening the capture store: WAL, ``synchronous=NORMAL``, schema migrations, meta and event rows.

The database is created owner-only (0600; SQLite gives its -wal and -shm files the same mode).
WAL lets the CLI and the web UI read while the writer thread writes; ``synchronous=NORMAL`` means
a commit is a write to the WAL without fsync, so batching is cheap and a killed process loses
nothing that was committed (only a power loss could). Both the writer and readers go through
``connect``, which also gives the connection the SQL functions ``ctxscope_text(data, dict)`` (a
compressed text) and ``ctxscope_segment_text(id)`` (a search segment's text, read back from the stored
body that holds it by the resolver the inspector registers with ``set_segment_texts``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import sqlite_utils

from ctxscope.inspector import owner_only
from ctxscope.inspector.clock import iso, now_iso
from ctxscope.inspector.store.blobs import text_of
from ctxscope.inspector.store.migrations import migrations

__all__ = ["iso", "now_iso"]  # at home in inspector/clock.py; many callers import them from here

BUSY_TIMEOUT_S = 5.0
PAGE_SIZE = 8192

# Given a connection, the function that reads a search segment's text back from the bodies
# (docs/architecture.md, "The search index"). The store knows rows, not prompts: the inspector
# registers it (``ctxscope.inspector.search_text``); each connection makes its own on first use.
SegmentTexts = Callable[[sqlite_utils.Database], Callable[[int], "str | None"]]
_segment_texts: list[SegmentTexts] = []


def set_segment_texts(factory: SegmentTexts) -> None:
    """Register how a connection resolves a search segment's text (the last registration wins)."""
    _segment_texts[:] = [factory]


def _segment_text_function(db: sqlite_utils.Database) -> Callable[[int], str | None]:
    made: list[Callable[[int], str | None]] = []

    def segment_text(segment: int) -> str | None:
        if not made:
            if not _segment_texts:  # an error, not an empty text: FTS5 would delete the wrong terms
                raise RuntimeError("no search text resolver registered (import ctxscope.inspector.search_text)")
            made.append(_segment_texts[0](db))
        return made[0](segment)

    return segment_text


def connect(path: str | Path, *, check_same_thread: bool = True, migrate: bool = True) -> sqlite_utils.Database:
    """A Database on ``path`` in WAL mode, migrated to the current schema unless ``migrate=False``."""
    path = Path(path)
    if not path.parent.exists():
        owner_only.private_dir(path.parent)
    owner_only.create_private_file(path)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=check_same_thread)
    conn.create_function("ctxscope_text", 2, lambda data, d: text_of(conn, data, d), deterministic=True)
    db = sqlite_utils.Database(conn, execute_plugins=False)
    conn.create_function("ctxscope_segment_text", 1, _segment_text_function(db))
    # A new file gets 8 KB pages: a call row (~1.4 KB) and the mid-sized chunks then waste less of
    # each page (6% smaller at 3,000 calls). A file that exists keeps its page size.
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    _enable_wal(db)
    db.execute("PRAGMA synchronous=NORMAL")
    if migrate:
        ensure_schema(db)
    return db


def shrink_memory(db: sqlite_utils.Database) -> None:
    """Give back the connection's page cache (an idle writer child); it fills again from the file."""
    db.execute("PRAGMA shrink_memory")


def _enable_wal(db: sqlite_utils.Database) -> None:
    """WAL mode, waiting out another connection switching it at the same moment: SQLite answers
    that race with "database is locked" at once, without its busy timeout (5 in 300 races of six
    connections opening a new database)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.enable_wal()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def ensure_schema(db: sqlite_utils.Database) -> None:
    """Apply pending migrations, holding the write lock so two processes never race to create tables."""
    if not migrations.pending(db):
        return
    db.execute("BEGIN IMMEDIATE")  # waits (busy timeout) for another process doing the same
    try:
        migrations.apply(db)  # nested atomic() blocks become savepoints inside our transaction
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


def begin(db: sqlite_utils.Database) -> None:
    """Open a write transaction, taking the write lock now (waiting out another writer) rather than fail on upgrade."""
    db.execute("BEGIN IMMEDIATE")


def commit(db: sqlite_utils.Database) -> None:
    db.execute("COMMIT")


class Savepoint:
    """A savepoint inside the open transaction: its statements are undone if the block raises.

    sqlite_utils' ``atomic()`` does the same under a random name (os.urandom, a generator-based
    context manager): a cost on every stored call. SQLite allows one name for nested savepoints
    (RELEASE and ROLLBACK TO take the innermost), so this one has a fixed name.
    """

    __slots__ = ("conn",)

    def __init__(self, db: sqlite_utils.Database):
        self.conn = db.conn

    def __enter__(self) -> Savepoint:
        self.conn.execute("SAVEPOINT ctxscope")
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if kind is None:
            self.conn.execute("RELEASE ctxscope")
        elif self.conn.in_transaction:  # an error may have ended the whole transaction: nothing to undo then
            self.conn.execute("ROLLBACK TO ctxscope")
            self.conn.execute("RELEASE ctxscope")


def is_stored(db: sqlite_utils.Database, call_id: str) -> bool:
    return db.execute("SELECT 1 FROM calls WHERE id = ?", [call_id]).fetchone() is not None


def applied_migrations(db: sqlite_utils.Database) -> list[str]:
    return [m.name for m in migrations.applied(db)]


def get_meta(db: sqlite_utils.Database, key: str, default: str | None = None) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return default if row is None else row[0]


def set_meta(db: sqlite_utils.Database, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def next_capture_epoch(db: sqlite_utils.Database) -> int:
    """Increment and return ``capture_epoch``: each writer start is a new capture epoch."""
    with db.atomic():
        epoch = int(get_meta(db, "capture_epoch", "0") or 0) + 1
        set_meta(db, "capture_epoch", str(epoch))
    return epoch


def record_event(
    db: sqlite_utils.Database,
    kind: str,
    *,
    call_id: str | None = None,
    count: int = 1,
    detail: str | None = None,
    at: str | None = None,
) -> None:
    db.execute(
        "INSERT INTO store_events (at, kind, call_id, count, detail) VALUES (?, ?, ?, ?, ?)",
        [at or now_iso(), kind, call_id, count, detail[:2000] if detail else detail],
    )
