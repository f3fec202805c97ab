"""The background writer: the proxy's ExchangeSink, storing exchanges off the hot path (P5).

``submit`` only puts the exchange on a bounded queue: it never blocks, never raises, and never
touches SQLite. One thread owns the connection; it takes whatever is queued, stores each exchange
in its own savepoint and commits the batch at least every ``batch_interval`` seconds (WAL,
``synchronous=NORMAL``: a commit is a write, not an fsync). So a SIGKILL loses at most the last
fraction of a second, and ``stop()`` (wire it to SIGINT/SIGTERM) drains the queue first.

A failing exchange (locked or full database, a parser bug) is counted, logged on the
"ctxscope.store" logger and recorded in ``store_events`` for ``ctxscope db status``; the thread
carries on. A queue overflow drops the exchange, which is counted the same way.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from ctxscope.inspector import store
from ctxscope.inspector.ingest import Analyzer, IngestState, ingest
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

MAX_BATCH = 500
MAX_PENDING_EVENTS = 1000
_STOP = object()


@dataclass(frozen=True)
class WriterStats:
    """Live counters of this writer (persisted totals across runs are in ``store_events``)."""

    queued: int = 0  # waiting in the queue now
    queued_bytes: int = 0  # their request + response bytes
    written: int = 0  # calls committed
    failed: int = 0  # exchanges that could not be stored
    dropped: int = 0  # exchanges refused because the queue was full or the writer was stopped
    analysis_failed: int = 0  # analyzer exceptions (the call itself was kept)
    parse_failed: int = 0  # responses the parser choked on (raw bytes kept)
    commits: int = 0
    last_error: str | None = None
    running: bool = False


class CaptureWriter:
    """ExchangeSink that stores exchanges in the capture database from one background thread.

    No locks are shared with the submitting thread: the queue is a C ``SimpleQueue`` and each
    counter has one writing thread, so ``stop()`` is safe to call from a signal handler that
    interrupted ``submit()``.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        batch_interval: float = 0.2,
        max_queue: int = 10000,
        max_queue_bytes: int = 1 << 30,
        analyzers: Sequence[Analyzer] = (),
    ):
        self.db_path = Path(db_path)
        self.batch_interval = batch_interval
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.analyzers = tuple(analyzers)
        self.capture_epoch: int | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._accepting = True
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        # Written by the submitting thread only.
        self._drop_counter = itertools.count(1)
        self._dropped = 0
        self._bytes_in = 0
        # Written by the writer thread only.
        self._written = self._failed = self._analysis_failed = self._parse_failed = self._commits = 0
        self._last_error: str | None = None
        self._bytes_out = 0
        self._pending_events: list[dict] = []  # failures not yet recorded in store_events
        self._persisted_drops = 0

    # -- the proxy's side -------------------------------------------------------------------

    def submit(self, exchange: Exchange) -> None:
        """Queue an exchange for storage; never blocks, never raises."""
        try:
            if not self._accepting:
                self._drop(exchange, "capture writer is not running")
            elif self._queue.qsize() >= self.max_queue:
                self._drop(exchange, "capture queue is full")
            else:
                size = _size(exchange)
                backlog = self._bytes_in - self._bytes_out
                if backlog > 0 and backlog + size > self.max_queue_bytes:
                    self._drop(exchange, "capture queue holds too many bytes")
                    return
                self._bytes_in += size
                self._queue.put(exchange)
        except Exception:  # pragma: no cover - the hot path must never raise
            pass

    def _drop(self, exchange: Exchange, why: str) -> None:
        n = next(self._drop_counter)
        self._dropped = max(self._dropped, n)
        self._last_error = why
        if n == 1 or n % 1000 == 0:  # a full queue drops many: do not flood the log
            log.error("capture dropped call %s: %s (%d dropped so far)", getattr(exchange, "id", "?"), why, n)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Open (and migrate) the database in the writer thread; raises if it cannot be opened."""
        if self._thread is not None:
            raise RuntimeError("CaptureWriter already started")
        self._thread = threading.Thread(target=self._run, name="ctxscope-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._accepting = False
            raise self._start_error

    def stop(self, timeout: float = 30) -> bool:
        """Stop accepting, store everything queued, close. True when everything was stored or counted."""
        self._accepting = False
        thread = self._thread
        if thread is None or not thread.is_alive():
            return self._queue.empty()
        self._queue.put(_STOP)
        thread.join(timeout)
        if thread.is_alive():
            log.error("capture writer did not drain within %.1fs; %d calls still queued", timeout, self._queue.qsize())
            return False
        return True

    def stats(self) -> WriterStats:
        return WriterStats(
            queued=self._queue.qsize(),
            queued_bytes=max(0, self._bytes_in - self._bytes_out),
            written=self._written,
            failed=self._failed,
            dropped=self._dropped,
            analysis_failed=self._analysis_failed,
            parse_failed=self._parse_failed,
            commits=self._commits,
            last_error=self._last_error,
            running=self._thread is not None and self._thread.is_alive(),
        )

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            db = store.connect(self.db_path)
            self.capture_epoch = store.next_capture_epoch(db)
            store.record_event(db, "writer_started", detail=f"capture_epoch {self.capture_epoch}")
        except BaseException as e:
            log.error("cannot open capture database %s: %s", self.db_path, e)
            self._start_error = e
            self._ready.set()
            return
        self._ready.set()
        state = IngestState(capture_epoch=self.capture_epoch)
        try:
            stopping = False
            while not stopping:
                item = self._take(block=True)
                if item is _STOP:
                    break
                stopping = self._safe_batch(db, state, item)
            # A submit that raced with stop() may have queued behind the stop marker.
            while True:
                item = self._take()
                if item is None:
                    break
                if item is not _STOP:
                    self._safe_batch(db, state, item, more=False)
            self._flush_events(db)
        finally:
            self._accepting = False
            try:
                store.record_event(db, "writer_stopped")
                db.close()
            except Exception:
                pass

    def _take(self, block: bool = False):
        """The next queued item (None if empty and not blocking), accounting for its bytes."""
        try:
            item = self._queue.get(block)
        except queue.Empty:
            return None
        if item is not _STOP:
            self._bytes_out += _size(item)
        return item

    def _safe_batch(self, db: sqlite_utils.Database, state: IngestState, first: Exchange, more: bool = True) -> bool:
        try:
            return self._write_batch(db, state, first, more)
        except Exception as e:  # a bug in the batch logic itself: keep the thread alive
            log.exception("capture writer error")
            self._last_error = _describe(e)
            self._failed += 1
            try:
                db.rollback()
            except Exception:
                pass
            state.bases.clear()
            return False

    def _write_batch(self, db: sqlite_utils.Database, state: IngestState, first: Exchange, more: bool = True) -> bool:
        """Store ``first`` and whatever else is queued in one transaction; True if a stop was seen.

        Commits when the queue is empty, after MAX_BATCH calls or after ``batch_interval``. If the
        transaction itself fails, each call of the batch is retried in its own transaction.
        """
        batch = [first]
        stopping = False
        outcome = {"written": 0, "failed": 0, "analysis_failed": 0, "parse_failed": 0}
        events: list[dict] = []
        pending = list(self._pending_events)
        drops = self._dropped - self._persisted_drops
        try:
            # IMMEDIATE: take the write lock now (waiting out another writer) rather than fail on upgrade.
            db.execute("BEGIN IMMEDIATE")
            began = time.monotonic()
            while True:
                self._write_one(db, state, batch[-1], outcome, events)
                if not more or len(batch) >= MAX_BATCH or time.monotonic() - began >= self.batch_interval:
                    break
                nxt = self._take()
                if nxt is None:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                batch.append(nxt)
            self._record_events(db, pending + events, drops)
            db.execute("COMMIT")
        except Exception as e:
            db.rollback()
            state.bases.clear()
            if len(batch) > 1:
                log.warning("capture batch of %d failed (%s); retrying call by call", len(batch), _describe(e))
                for ex in batch:
                    self._write_batch(db, state, ex, more=False)
            else:
                self._fail(db, batch[0], e)
            return stopping
        del self._pending_events[: len(pending)]
        self._persisted_drops += drops
        self._written += outcome["written"]
        self._failed += outcome["failed"]
        self._analysis_failed += outcome["analysis_failed"]
        self._parse_failed += outcome["parse_failed"]
        self._commits += 1
        if events:
            self._last_error = events[-1]["detail"]
        return stopping

    def _write_one(self, db: sqlite_utils.Database, state: IngestState, ex: Exchange, outcome: dict, events: list) -> None:
        """One exchange in a savepoint: a failure rolls back only this exchange."""
        try:
            with db.atomic():
                result = ingest(db, ex, state, self.analyzers)
        except Exception as e:
            if not db.conn.in_transaction:
                raise  # the error ended the whole transaction (e.g. disk full): redo the batch
            state.bases.clear()
            outcome["failed"] += 1
            events.append(_event("write_failed", ex, _describe(e)))
            log.error("capture of call %s failed: %s", ex.id, _describe(e))
            return
        outcome["written"] += 1
        if result.row.get("parse_error"):
            outcome["parse_failed"] += 1
            events.append(_event("parse_failed", ex, result.row["parse_error"]))
            log.warning("response of call %s could not be parsed: %s", ex.id, result.row["parse_error"])
        for name, err in result.analysis_errors:
            outcome["analysis_failed"] += 1
            events.append(_event("analysis_failed", ex, f"{name}: {_describe(err)}"))
            log.warning("analyzer %s failed on call %s: %s", name, ex.id, _describe(err))

    def _fail(self, db: sqlite_utils.Database, ex: Exchange, e: BaseException) -> None:
        """A call that could not be stored even alone: count, log, and record it when possible."""
        log.error("capture of call %s failed: %s", ex.id, _describe(e))
        self._failed += 1
        self._last_error = _describe(e)
        self._pending_events.append(_event("write_failed", ex, _describe(e)))
        del self._pending_events[:-MAX_PENDING_EVENTS]  # a dead disk must not grow memory forever
        self._flush_events(db)

    def _flush_events(self, db: sqlite_utils.Database) -> None:
        """Record unrecorded failures and drops in their own transaction (best effort)."""
        pending = list(self._pending_events)
        drops = self._dropped - self._persisted_drops
        if not pending and not drops:
            return
        try:
            with db.atomic():
                self._record_events(db, pending, drops)
        except Exception as e:
            log.error("could not record capture failures in the database: %s", _describe(e))
            return
        del self._pending_events[: len(pending)]
        self._persisted_drops += drops

    def _record_events(self, db: sqlite_utils.Database, events: list[dict], drops: int) -> None:
        for ev in events:
            store.record_event(db, ev["kind"], call_id=ev["call_id"], detail=ev["detail"], at=ev["at"])
        if drops:
            store.record_event(db, "dropped", count=drops, detail=self._last_error)


def _size(ex: Exchange) -> int:
    return len(ex.request_body) + len(ex.response_body)


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _event(kind: str, ex: Exchange, detail: str) -> dict:
    return {"kind": kind, "call_id": ex.id, "detail": detail, "at": store.now_iso()}
