"""Opening the capture store: WAL, ``synchronous=NORMAL``, schema migrations, meta and event rows.

The database is created owner-only (0600; SQLite gives its -wal and -shm files the same mode).
WAL lets the CLI and the web UI read while the writer thread writes; ``synchronous=NORMAL`` means
a commit is a write to the WAL without fsync, so batching is cheap and a killed process loses
nothing that was committed (only a power loss could). Every connection, the writer's and the
readers', gets the SQL function ``ctxscope_text(data, dict)`` (a compressed text); a connection
opened with a ``segment_texts`` reader also gets ``ctxscope_segment_text(id)`` (a search segment's
text, read back from the stored body that holds it).

Readers (the CLI, the web UI) get a ``sqlite_utils.Database`` from ``connect``; the writer gets a
:class:`Handle` from ``open_handle``, the few calls the write path makes over a bare ``sqlite3``
connection, so it loads sqlite-utils only when a migration must run (and the writer child not even
then: docs/architecture.md, "Memory"). The store's functions take either, typed :class:`Db`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ctxscope.inspector.base import owner_only
from ctxscope.inspector.base.clock import now_iso
from ctxscope.inspector.store.blobs import text_of
from ctxscope.inspector.store.migrations import MIGRATION_SET, NAMES, migration_set

if TYPE_CHECKING:
    import sqlite_utils

BUSY_TIMEOUT_S = 5.0
PAGE_SIZE = 8192
Params = Sequence[Any] | dict[str, Any] | None


class Db(Protocol):
    """A connection as the store's functions use it: the writer's :class:`Handle`, or the
    ``sqlite_utils.Database`` of ``connect`` (readers)."""

    @property
    def conn(self) -> sqlite3.Connection: ...

    def execute(self, sql: str, parameters: Params = None) -> sqlite3.Cursor: ...

    def query(self, sql: str, params: Params = None) -> Iterator[dict[str, Any]]: ...

    def table_names(self) -> list[str]: ...

    def atomic(self) -> AbstractContextManager[object]: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


class Handle:
    """The writer's connection: what :class:`Db` offers, over ``sqlite3`` alone (no ORM).

    It behaves as ``sqlite_utils.Database`` does for these calls: a statement outside a transaction
    commits at once (the connection is in autocommit mode, so Python opens no transaction of its
    own), ``atomic`` is a transaction, or a savepoint inside one, recursive triggers are on.
    """

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection):
        conn.isolation_level = None
        conn.execute("PRAGMA recursive_triggers=on")
        self.conn = conn

    def execute(self, sql: str, parameters: Params = None) -> sqlite3.Cursor:
        return self.conn.execute(sql) if parameters is None else self.conn.execute(sql, parameters)

    def query(self, sql: str, params: Params = None) -> Iterator[dict[str, Any]]:
        """The rows of a SELECT as dicts."""
        cursor = self.execute(sql, params)
        keys = [d[0] for d in cursor.description or ()]
        return (dict(zip(keys, row, strict=True)) for row in cursor)

    def table_names(self) -> list[str]:
        return [name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Handle]:
        if self.conn.in_transaction:
            with Savepoint(self):
                yield self
            return
        self.conn.execute("BEGIN")
        try:
            yield self
            self.conn.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()


# Given a connection, the function that reads a search segment's text back from the bodies
# (docs/architecture.md, "The search index"). The store knows rows, not prompts: whoever opens a
# connection that reads search texts passes one (``ctxscope.inspector.pipeline.search_text.SegmentTexts``);
# each connection makes its own on first use. A connection opened without one has no
# ``ctxscope_segment_text``: reading the view fails (never an empty text, which would have FTS5
# delete the wrong terms).
SegmentReader = Callable[[Db], Callable[[int], "str | None"]]


def _segment_text_function(db: Db, reader: SegmentReader) -> Callable[[int], str | None]:
    made: list[Callable[[int], str | None]] = []

    def segment_text(segment: int) -> str | None:
        if not made:
            made.append(reader(db))
        return made[0](segment)

    return segment_text


def connect(
    path: str | Path,
    *,
    check_same_thread: bool = True,
    migrate: bool = True,
    segment_texts: SegmentReader | None = None,
) -> sqlite_utils.Database:
    """A Database on ``path`` in WAL mode, migrated to the current schema unless ``migrate=False``;
    ``segment_texts``: how it reads search texts back (for snippets, phrase checks, clearing the index)."""
    import sqlite_utils  # readers only: the writer's open_handle does without it

    db = sqlite_utils.Database(_connection(path, check_same_thread), execute_plugins=False)
    _prepare(db, migrate, segment_texts)
    return db


def open_handle(path: str | Path, *, migrate: bool = True, segment_texts: SegmentReader | None = None) -> Handle:
    """The writer's :class:`Handle` on ``path``, set up as ``connect`` sets up a Database."""
    db = Handle(_connection(path, True))
    _prepare(db, migrate, segment_texts)
    return db


def _connection(path: str | Path, check_same_thread: bool) -> sqlite3.Connection:
    path = Path(path)
    if not path.parent.exists():
        owner_only.private_dir(path.parent)
    owner_only.create_private_file(path)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=check_same_thread)
    conn.create_function("ctxscope_text", 2, lambda data, d: text_of(conn, data, d), deterministic=True)
    return conn


def _prepare(db: Db, migrate: bool, segment_texts: SegmentReader | None) -> None:
    if segment_texts is not None:
        db.conn.create_function("ctxscope_segment_text", 1, _segment_text_function(db, segment_texts))
    # A new file gets 8 KB pages: a call row (~1.4 KB) and the mid-sized chunks then waste less of
    # each page (6% smaller at 3,000 calls). A file that exists keeps its page size.
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    _enable_wal(db)
    db.execute("PRAGMA synchronous=NORMAL")
    if migrate:
        ensure_schema(db)


def shrink_memory(db: Db) -> None:
    """Give back the connection's page cache (an idle writer child); it fills again from the file."""
    db.execute("PRAGMA shrink_memory")


def _enable_wal(db: Db) -> None:
    """WAL mode, waiting out another connection switching it at the same moment: SQLite answers
    that race with "database is locked" at once, without its busy timeout (5 in 300 races of six
    connections opening a new database)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=wal")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def ensure_schema(db: Db) -> None:
    """Apply pending migrations, holding the write lock so two processes never race to create tables.

    Only a file that needs a migration loads sqlite-utils, whose ``Migrations`` run them (on the same
    connection) and record them (docs/architecture.md, "Memory")."""
    if not pending_migrations(db):
        return
    import sqlite_utils

    full = db if isinstance(db, sqlite_utils.Database) else sqlite_utils.Database(db.conn, execute_plugins=False)
    db.execute("BEGIN IMMEDIATE")  # waits (busy timeout) for another process doing the same
    try:
        migration_set().apply(full)  # nested atomic() blocks become savepoints inside our transaction
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


def pending_migrations(db: Db) -> list[str]:
    """The migrations ``db`` has not had, read from sqlite-utils' record of them without loading it."""
    table = "_sqlite_migrations"  # sqlite_utils.migrations.Migrations.migrations_table
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone() is None:
        return list(NAMES)
    applied = {name for (name,) in db.execute(f"SELECT name FROM {table} WHERE migration_set = ?", [MIGRATION_SET])}
    return [name for name in NAMES if name not in applied]


def begin(db: Db) -> None:
    """Open a write transaction, taking the write lock now (waiting out another writer) rather than fail on upgrade."""
    db.execute("BEGIN IMMEDIATE")


def commit(db: Db) -> None:
    db.execute("COMMIT")


class Savepoint:
    """A savepoint inside the open transaction: its statements are undone if the block raises.

    sqlite_utils' ``atomic()`` does the same under a random name (os.urandom, a generator-based
    context manager): a cost on every stored call. SQLite allows one name for nested savepoints
    (RELEASE and ROLLBACK TO take the innermost), so this one has a fixed name.
    """

    __slots__ = ("conn",)

    def __init__(self, db: Db):
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


def is_stored(db: Db, call_id: str) -> bool:
    return db.execute("SELECT 1 FROM calls WHERE id = ?", [call_id]).fetchone() is not None


def applied_migrations(db: sqlite_utils.Database) -> list[str]:
    return [m.name for m in migration_set().applied(db)]


def get_meta(db: Db, key: str, default: str | None = None) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return default if row is None else row[0]


def set_meta(db: Db, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def next_capture_epoch(db: Db) -> int:
    """Increment and return ``capture_epoch``: each writer start is a new capture epoch."""
    with db.atomic():
        epoch = int(get_meta(db, "capture_epoch", "0") or 0) + 1
        set_meta(db, "capture_epoch", str(epoch))
    return epoch


def record_event(
    db: Db,
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
