"""The background writer: the proxy's ExchangeSink, storing exchanges off the hot path (P5).

``submit`` only puts the exchange on a bounded queue: it never blocks, never raises, and never
touches SQLite. One thread owns the connection; it takes whatever is queued, stores each exchange
in its own savepoint and commits the batch at least every ``batch_interval`` seconds (WAL,
``synchronous=NORMAL``: a commit is a write, not an fsync). So a SIGKILL loses at most the last
fraction of a second, and ``stop()`` (wire it to SIGINT/SIGTERM) drains the queue first.

Two kinds of failure are told apart:
- the store is unavailable (it cannot be opened, the disk is full, an I/O error, a corrupt file:
  SQLite's operational errors and OSError): nothing is lost. The calls of the batch stay first in
  line, the failure is counted and logged at once, and storing is retried every
  ``retry_interval`` seconds, however long it takes; the counters say so from the first failure
  (``store_failures``, ``store_down_since``, ``last_error``). ``start`` does not fail for it: the
  proxy forwards regardless.
- one exchange cannot be stored (a constraint, a bug on odd input): that exchange is counted,
  logged on the "ctxscope.store" logger and recorded in ``store_events`` for ``ctxscope db
  status``; the others are stored.
A queue overflow drops the exchange, which is counted the same way. Calls still unstored at stop
(the store never came back) are written to a spool file, which the next writer on the database
stores (``keep_unstored``; the writer child has its own spool and turns this off).
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from ctxscope.inspector import owner_only, store
from ctxscope.inspector.ingest import Analyzer, IngestState, ingest
from ctxscope.inspector.writer_status import StatusPublisher
from ctxscope.proxy.decoding import DEFAULT_MAX_SIZE
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

MAX_BATCH = 500
MAX_PENDING_EVENTS = 1000
RETRY_INTERVAL = 2.0  # seconds between attempts to store while the store is unavailable
REMIND_INTERVAL = 60.0  # an outage is logged at once, then again this often
_STOP = object()


@dataclass(frozen=True)
class WriterStats:
    """Live counters of this writer (persisted totals across runs are in ``store_events``)."""

    queued: int = 0  # waiting to be stored now
    queued_bytes: int = 0  # their request + response bytes
    written: int = 0  # calls committed
    failed: int = 0  # exchanges that could not be stored (given up)
    dropped: int = 0  # exchanges refused because the queue was full or the writer was stopped
    analysis_failed: int = 0  # analyzer exceptions (the call itself was kept)
    parse_failed: int = 0  # responses the parser choked on (raw bytes kept)
    commits: int = 0
    last_error: str | None = None
    running: bool = False
    already_stored: int = 0  # calls found already stored (from a recovered spool): not stored twice
    store_failures: int = 0  # failed attempts to open or write the store (or writer processes that died)
    store_down_since: str | None = None  # when the current store outage began; None while storing works
    restarts: int = 0  # writer processes started again after one died
    spools_quarantined: int = 0  # spool files renamed aside as unsafe to read
    spool_records_torn: int = 0  # records cut short by a crash mid-append, dropped
    spool_failures: int = 0  # appends to the spool that failed (the calls were held in memory)
    in_memory: int = 0  # calls held in memory because the spool could not be written


def store_unavailable(e: BaseException) -> bool:
    """Whether an error says the store as a whole cannot be written now (retry later, keep the
    calls) rather than that one exchange cannot be stored."""
    return isinstance(e, (sqlite3.OperationalError, OSError)) or type(e) is sqlite3.DatabaseError


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
        max_queue_bytes: int = 256 << 20,
        analyzers: Sequence[Analyzer] = (),
        max_decoded_bytes: int = DEFAULT_MAX_SIZE,
        retry_interval: float = RETRY_INTERVAL,
        status_file: bool = True,
        keep_unstored: bool = True,
    ):
        self.db_path = Path(db_path)
        self.batch_interval = batch_interval
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.analyzers = tuple(analyzers)
        self.max_decoded_bytes = max_decoded_bytes
        self.retry_interval = retry_interval
        self.status_file = status_file
        self.keep_unstored = keep_unstored
        self.capture_epoch: int | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._accepting = True
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._publisher: StatusPublisher | None = None
        # Written by the submitting thread only.
        self._drop_counter = itertools.count(1)
        self._dropped = 0
        self._bytes_in = 0
        # Written by the writer thread only.
        self._pending: collections.deque[Exchange] = collections.deque()  # taken, not committed yet
        self._written = self._failed = self._analysis_failed = self._parse_failed = self._commits = 0
        self._already = 0
        self._last_error: str | None = None
        self._bytes_out = 0
        self._pending_events: list[dict] = []  # failures not yet recorded in store_events
        self._persisted_drops = 0
        self._store_failures = 0
        self._down_since: str | None = None
        self._outage_failures = 0
        self._reminded = 0.0

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
        """Start the writer thread and wait for its first attempt to open (and migrate) the
        database. A store that cannot be opened does not fail this: it is reported and retried."""
        if self._thread is not None:
            raise RuntimeError("CaptureWriter already started")
        self._thread = threading.Thread(target=self._run, name="ctxscope-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self.status_file:
            self._publisher = StatusPublisher(self.db_path, self.stats)

    def stop(self, timeout: float = 30) -> bool:
        """Stop accepting, store everything queued, close. True when everything was stored or counted."""
        self._accepting = False
        thread = self._thread
        try:
            if thread is None or not thread.is_alive():
                return self._queue.empty() and not self._pending
            self._stopping.set()
            self._queue.put(_STOP)
            thread.join(timeout)
            if thread.is_alive():
                log.error("capture writer did not drain within %.1fs; %d calls still queued", timeout, self._queue.qsize())
                return False
            return self._queue.empty() and not self._pending
        finally:
            if self._publisher is not None:
                self._publisher.publish()
                self._publisher.close()
                self._publisher = None

    def stats(self) -> WriterStats:
        return WriterStats(
            queued=self._queue.qsize() + len(self._pending),
            queued_bytes=max(0, self._bytes_in - self._bytes_out),
            written=self._written,
            failed=self._failed,
            dropped=self._dropped,
            analysis_failed=self._analysis_failed,
            parse_failed=self._parse_failed,
            commits=self._commits,
            last_error=self._last_error,
            running=self._thread is not None and self._thread.is_alive(),
            already_stored=self._already,
            store_failures=self._store_failures,
            store_down_since=self._down_since,
        )

    @property
    def store_down(self) -> bool:
        return self._down_since is not None

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        db: sqlite_utils.Database | None = None
        state: IngestState | None = None
        stopping = final = False
        try:
            while True:
                if db is None:
                    db = self._open()
                    self._ready.set()
                    if db is not None:
                        state = IngestState(self.capture_epoch or 0, self.max_decoded_bytes)
                if db is not None:
                    if not self._pending:
                        item = self._take(block=not stopping)
                        if item is None:
                            break  # stopping, and everything is stored
                        if item is _STOP:
                            stopping = True
                            continue
                        self._pending.append(item)
                    ok, saw_stop = self._safe_batch(db, state)
                    stopping = stopping or saw_stop
                    if ok:
                        continue
                    _close(db)  # the store is unavailable: reconnect for the next attempt
                    db = None
                if final:
                    break
                if not self._wait_retry():
                    final = True  # asked to stop: one last attempt at once, then give up
            if db is not None:
                self._flush_events(db)
        finally:
            self._accepting = False
            self._ready.set()
            self._leave(db)

    def _wait_retry(self) -> bool:
        """Wait before the next attempt on an unavailable store; False once a stop was asked for
        (the caller then makes one last attempt, or gives up)."""
        return not self._stopping.wait(self.retry_interval)

    def _open(self) -> sqlite_utils.Database | None:
        """Connect (creating and migrating the database if need be); None if the store is unavailable."""
        db = None
        try:
            db = store.connect(self.db_path)
            owner_only.private_store(self.db_path)
            if self.capture_epoch is None:
                self.capture_epoch = store.next_capture_epoch(db)
                store.record_event(db, "writer_started", detail=f"capture_epoch {self.capture_epoch}")
            if self._down_since is not None and not self._pending and self._queue.empty():
                with db.atomic():  # nothing waits: this write alone says the store works again
                    self._record_events(db, self._outage(), 0)
                self._store_back()
            return db
        except Exception as e:
            _close(db)
            self._store_failed(e, opening=True)
            return None

    def _leave(self, db: sqlite_utils.Database | None) -> None:
        """The thread ends: say what could not be stored, keep it in a spool, close."""
        unstored = list(self._pending)
        while True:
            item = self._take()
            if item is None:
                break
            if item is not _STOP:
                unstored.append(item)
        if unstored:
            self._pending.extend(unstored[len(self._pending):])
            log.error("capture writer stopping with %d calls unstored: the store is unavailable (%s)",
                      len(unstored), self._last_error)
            if self.keep_unstored:
                self._spool_unstored(unstored)
        if db is not None:
            try:
                store.record_event(db, "writer_stopped")
            except Exception:
                pass
            _close(db)

    def _spool_unstored(self, calls: list[Exchange]) -> None:
        from ctxscope.inspector.spool import keep_leftovers
        from ctxscope.inspector.writer_child import pack  # the child's module imports this one

        keep_leftovers(self.db_path, [pack(ex) for ex in calls])

    def _take(self, block: bool = False):
        """The next queued item (None if empty and not blocking)."""
        try:
            return self._queue.get(block)
        except queue.Empty:
            return None

    def _store_failed(self, e: BaseException, *, opening: bool = False) -> None:
        """The store is unavailable: count it, say it (at once, then now and then), keep the calls."""
        self._store_failures += 1
        self._outage_failures += 1
        self._last_error = _describe(e)
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = store.now_iso()
            self._reminded = now
            log.error("capture store %s unavailable%s: %s. Forwarding goes on; captured calls wait (%d now) and "
                      "storing is retried every %g s", self.db_path, " (cannot open it)" if opening else "",
                      self._last_error, self.stats().queued, self.retry_interval)
        elif now - self._reminded >= REMIND_INTERVAL:
            self._reminded = now
            log.error("capture store %s still unavailable since %s (%d failed attempts): %s; %d calls wait",
                      self.db_path, self._down_since, self._outage_failures, self._last_error, self.stats().queued)

    def _outage(self) -> list[dict]:
        """The event that records the current outage (none while the store works)."""
        if self._down_since is None:
            return []
        return [{"kind": "store_unavailable", "call_id": None, "detail": self._last_error, "at": self._down_since,
                 "count": self._outage_failures}]

    def _store_back(self) -> None:
        """A commit worked after an outage (which it recorded): say so."""
        log.warning("capture store %s works again after %d failed attempts since %s; storing the calls that waited",
                    self.db_path, self._outage_failures, self._down_since)
        self._down_since = None
        self._outage_failures = 0

    def _safe_batch(self, db: sqlite_utils.Database, state: IngestState) -> tuple[bool, bool]:
        """Store a batch; (False if the store is unavailable, True if a stop marker was seen)."""
        try:
            return self._write_batch(db, state)
        except Exception as e:  # a bug in the batch logic itself: keep the thread alive
            log.exception("capture writer error")
            self._last_error = _describe(e)
            try:
                db.rollback()
            except Exception:
                pass
            state.bases.clear()
            if store_unavailable(e):
                self._store_failed(e)
                return False, False
            if self._pending:  # the call it was on is given up, or the thread would loop on it
                self._done(self._pending.popleft())
                self._failed += 1
            return True, False

    def _write_batch(self, db: sqlite_utils.Database, state: IngestState, more: bool = True) -> tuple[bool, bool]:
        """Store the pending calls and whatever else is queued in one transaction.

        Commits when the queue is empty, after MAX_BATCH calls or after ``batch_interval``. If the
        store is unavailable, the batch goes back to the front of the line. If the transaction
        fails otherwise, each call of the batch is retried in its own transaction.
        """
        batch: list[Exchange] = []
        stopping = False
        outcome = {"written": 0, "failed": 0, "analysis_failed": 0, "parse_failed": 0, "already": 0}
        events: list[dict] = []
        down = self._down_since is not None
        outage = self._outage()
        pending = list(self._pending_events)
        drops = self._dropped - self._persisted_drops
        try:
            # IMMEDIATE: take the write lock now (waiting out another writer) rather than fail on upgrade.
            db.execute("BEGIN IMMEDIATE")
            began = time.monotonic()
            while len(batch) < MAX_BATCH and (more or not batch):
                if self._pending:
                    nxt = self._pending.popleft()
                elif not batch or time.monotonic() - began < self.batch_interval:
                    nxt = self._take()
                    if nxt is None:
                        break
                    if nxt is _STOP:
                        stopping = True
                        break
                else:
                    break
                batch.append(nxt)
                self._write_one(db, state, nxt, outcome, events)
            self._record_events(db, outage + pending + events, drops)
            db.execute("COMMIT")
        except Exception as e:
            try:
                db.rollback()
            except Exception:
                pass
            state.bases.clear()
            self._pending.extendleft(reversed(batch))  # first in line again, in order
            if store_unavailable(e):
                self._store_failed(e)
                return False, stopping
            if len(batch) > 1:
                log.warning("capture batch of %d failed (%s); retrying call by call", len(batch), _describe(e))
                for _ in batch:
                    ok, _saw = self._write_batch(db, state, more=False)
                    if not ok:
                        return False, stopping
            elif batch:
                self._fail(db, self._pending.popleft(), e)
            return True, stopping
        if down:
            self._store_back()
        del self._pending_events[: len(pending)]
        self._persisted_drops += drops
        for ex in batch:
            self._done(ex)
        self._written += outcome["written"]
        self._failed += outcome["failed"]
        self._analysis_failed += outcome["analysis_failed"]
        self._parse_failed += outcome["parse_failed"]
        self._already += outcome["already"]
        self._commits += 1
        if events:
            self._last_error = events[-1]["detail"]
        return True, stopping

    def _done(self, ex: Exchange) -> None:
        self._bytes_out += _size(ex)

    def _write_one(self, db: sqlite_utils.Database, state: IngestState, ex: Exchange, outcome: dict, events: list) -> None:
        """One exchange in a savepoint: a failure rolls back only this exchange."""
        if db.execute("SELECT 1 FROM calls WHERE id = ?", [ex.id]).fetchone() is not None:
            outcome["already"] += 1  # a recovered spool held a call a killed writer had committed
            return
        try:
            with db.atomic():
                result = ingest(db, ex, state, self.analyzers)
        except Exception as e:
            if not db.conn.in_transaction or store_unavailable(e):
                raise  # the store failed, or the error ended the whole transaction: redo the batch
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
        self._done(ex)
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
            store.record_event(db, ev["kind"], call_id=ev["call_id"], detail=ev["detail"], at=ev["at"],
                               count=ev.get("count", 1))
        if drops:
            store.record_event(db, "dropped", count=drops, detail=self._last_error)


def _close(db: sqlite_utils.Database | None) -> None:
    if db is not None:
        try:
            db.close()
        except Exception:
            pass


def _size(ex: Exchange) -> int:
    return len(ex.request_body) + len(ex.response_body)


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _event(kind: str, ex: Exchange, detail: str) -> dict:
    return {"kind": kind, "call_id": ex.id, "detail": detail, "at": store.now_iso()}
