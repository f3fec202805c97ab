"""A few read connections to the capture store, used from worker threads.

SQLite reads can take milliseconds to seconds (a big body rebuilt from its delta chain), so they
never run on the daemon's event loop, which also forwards provider traffic: each read runs in a
worker thread via ``asyncio.to_thread`` on a connection taken from this pool. WAL lets these
readers work while the writer thread commits.

What a burst of big reads built does not stay (docs/architecture.md, "Memory"): once no read has run
for ``release_after`` seconds, the idle connections are closed (their page caches and search-text
readers go with them; the next read opens one in about a millisecond), the ``on_release`` hooks run
(the body cache empties) and the C heap's free pages go back to the system, in a worker thread.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from ctxscope.inspector.pipeline.session_titles import backfill_if_pending
from ctxscope.inspector.store.db import SegmentReader
from ctxscope.inspector.store.queries import open_db
from ctxscope.vocab.heap import release_heap

T = TypeVar("T")

RELEASE_AFTER = 5.0  # seconds without a read before the pool lets go of what its reads built


class ReadPool:
    """At most ``size`` concurrent readers, each on its own connection (reused between reads)."""

    def __init__(
        self,
        db_path: str | Path,
        segment_texts: SegmentReader,
        size: int = 4,
        release_after: float = RELEASE_AFTER,
        on_release: list[Callable[[], None]] | None = None,
    ):
        self.db_path = Path(db_path)
        self.segment_texts = segment_texts  # the search's snippets and phrase checks read texts through it
        self.release_after = release_after
        self.on_release = on_release if on_release is not None else []  # caches that empty with the pool
        self.releases = 0  # times the idle pool let go (tests read it)
        self._idle: list[sqlite_utils.Database] = []
        self._lock = threading.Lock()
        self._size = size
        self._sem: asyncio.Semaphore | None = None
        self._closed = False
        self._busy = 0  # reads running or waiting for their turn (on the loop only)
        self._read_since_release = False
        self._timer: asyncio.TimerHandle | None = None
        self._releasing: asyncio.Task | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:  # created lazily on the daemon's loop
            self._sem = asyncio.Semaphore(self._size)
        return self._sem

    def _take(self) -> sqlite_utils.Database:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        db = open_db(self.db_path, segment_texts=self.segment_texts)
        backfill_if_pending(db)  # a store older than the session titles gets them once, as it is migrated
        return db

    def _give(self, db: sqlite_utils.Database) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(db)
                return
        db.close()

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(db, *args)`` in the calling thread on a pooled connection."""
        db = self._take()
        try:
            result = fn(db, *args)
        except BaseException:
            if db.conn.in_transaction:
                db.conn.rollback()
            self._give(db)
            raise
        self._give(db)
        return result

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(db, *args)`` in a worker thread, never on the event loop."""
        self._busy += 1
        self._read_since_release = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            async with self._semaphore():
                return await asyncio.to_thread(self.run_sync, fn, *args)
        finally:
            self._busy -= 1
            if not self._busy and not self._closed:
                self._timer = asyncio.get_running_loop().call_later(self.release_after, self._went_idle)

    def _went_idle(self) -> None:
        """No read for ``release_after`` seconds: let go, off the loop (one release at a time)."""
        self._timer = None
        if self._busy or self._closed or not self._read_since_release:
            return
        if self._releasing is not None and not self._releasing.done():
            return
        self._read_since_release = False
        self._releasing = asyncio.ensure_future(asyncio.to_thread(self.release))

    def release(self) -> None:
        """Close the idle connections, empty the caches, give the free heap back. A read that
        starts meanwhile opens a connection of its own: nothing it uses is taken from it."""
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
        del idle
        for hook in self.on_release:
            hook()
        gc.collect()  # the cycles the reads' parsed bodies left (json trees, row dicts)
        release_heap()
        self.releases += 1

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
