"""A few read connections to the capture store, used from worker threads.

SQLite reads can take milliseconds to seconds (a big body rebuilt from its delta chain), so they
never run on the daemon's event loop, which also forwards provider traffic: each read runs in a
worker thread via ``asyncio.to_thread`` on a connection taken from this pool. WAL lets these
readers work while the writer thread commits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from ctxscope.inspector.store.db import SegmentReader
from ctxscope.inspector.store.queries import open_db

T = TypeVar("T")


class ReadPool:
    """At most ``size`` concurrent readers, each on its own connection (reused between reads)."""

    def __init__(self, db_path: str | Path, segment_texts: SegmentReader, size: int = 4):
        self.db_path = Path(db_path)
        self.segment_texts = segment_texts  # the search's snippets and phrase checks read texts through it
        self._idle: list[sqlite_utils.Database] = []
        self._lock = threading.Lock()
        self._size = size
        self._sem: asyncio.Semaphore | None = None
        self._closed = False

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:  # created lazily on the daemon's loop
            self._sem = asyncio.Semaphore(self._size)
        return self._sem

    def _take(self) -> sqlite_utils.Database:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return open_db(self.db_path, segment_texts=self.segment_texts)

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
        async with self._semaphore():
            return await asyncio.to_thread(self.run_sync, fn, *args)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
