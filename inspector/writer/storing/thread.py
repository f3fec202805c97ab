"""The background writer: the proxy's ExchangeSink, storing exchanges off the forwarding path.

``submit`` only puts the exchange on a bounded queue: it never blocks, never raises, and never
touches SQLite. One thread owns the connection; it takes whatever is queued, stores the exchanges
(a failing one sends the batch back, to be stored again with a savepoint per exchange: see
``work.py``) and commits the batch at least every ``batch_interval`` seconds (WAL,
``synchronous=NORMAL``: a commit is a write, not an fsync). So a SIGKILL loses at most the last
fraction of a second, and ``stop()`` (wire it to SIGINT/SIGTERM) drains the queue first.

Two kinds of failure are told apart (:mod:`~ctxscope.inspector.writer.storing.failures`):
- the store is unavailable: nothing is lost. The calls of the batch stay first in line, and
  storing is retried every ``retry_interval`` seconds, however long it takes; the counters say so
  from the first failure (``store_failures``, ``store_down_since``, ``last_error``). ``start``
  does not fail for it: the proxy forwards regardless.
- one exchange cannot be stored (a constraint, a bug on odd input): that exchange is counted,
  logged and recorded in ``store_events`` for ``ctxscope db status``; the others are stored.
A queue overflow drops the exchange, which is counted the same way. Calls still unstored at stop
(the store never came back) are written to a spool file, which the next writer on the database
stores (``keep_unstored``; the writer child has its own spool and turns this off).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxscope.inspector.base import owner_only
from ctxscope.inspector.pipeline.idle_release import release, trim
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.ingest import Analyzer, IngestState, RecentFailures, stored_failures
from ctxscope.inspector.writer.protocol import RETRY_INTERVAL, WriterUnavailable
from ctxscope.inspector.writer.status import StatusPublisher, WriterStats
from ctxscope.inspector.writer.storing.batches import (
    STOP_MARK,
    BatchStoring,
    Queued,
    Release,
    close_quietly,
    exchange_size,
)
from ctxscope.inspector.writer.storing.failures import (
    Outage,
    Unrecorded,
    describe,
    record,
)
from ctxscope.inspector.writer.storing.work import Deletion, serve_deletion
from ctxscope.inspector.writer.wire.call_fields import pack
from ctxscope.inspector.writer.wire.spool import keep_leftovers
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE

log = logging.getLogger("ctxscope.store")

_TALLIES = ("written", "failed", "analysis_failed", "parse_failed", "already_stored", "commits", "idle_releases")


class CaptureWriter(BatchStoring):
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
        capture_epoch: int | None = None,
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
        # None: a new capture epoch, taken when the store opens; a number: this writer continues
        # that epoch's capture (a writer child started again after an idle spell)
        self.capture_epoch: int | None = capture_epoch
        self._woke = capture_epoch is not None
        self._started_recorded = False  # store_events says when a writer started (or woke) and stopped
        self._queue: queue.SimpleQueue[Queued] = queue.SimpleQueue()
        # Requests in the queue that are not calls (a deletion, a release): never counted as backlog.
        self._requests = 0
        self._requests_lock = threading.Lock()
        self._accepting = True
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._publisher: StatusPublisher | None = None
        self.on_stored: Callable[[], None] | None = None
        # Written by the submitting thread only.
        self._drop_counter = itertools.count(1)
        self._dropped = 0
        self._dropped_before = 0  # calls dropped before they reached this writer (count_dropped)
        self._submit_failed = 0  # of the dropped: calls submit itself failed on
        self._bytes_in = 0
        # Written by the writer thread only.
        self._pending: collections.deque[Exchange] = collections.deque()  # taken, not committed yet
        self._storing = 0  # calls of the batch being written: off the queue and _pending, not counted yet
        self._isolate = 0  # the next this many calls are stored each in a savepoint (a batch stored again)
        self._counts: collections.Counter[str] = collections.Counter()  # the tallies of WriterStats
        self._last_error: str | None = None
        self._bytes_out = 0
        self._outage = Outage(self.db_path, retry_interval)
        self._unrecorded = Unrecorded()

    # -- the proxy's side -------------------------------------------------------------------

    def submit(self, exchange: Exchange) -> None:
        """Queue an exchange for storage; never blocks, never raises: a call it fails on is dropped
        and counted (``submit_failed``), with one line in the log."""
        try:
            publisher = self._publisher
            if publisher is not None and publisher.asleep:
                publisher.wake()
            if not self._accepting:
                self._drop(exchange, "capture writer is not running")
            elif self._queue.qsize() >= self.max_queue:
                self._drop(exchange, "capture queue is full")
            else:
                size = exchange_size(exchange)
                backlog = self._bytes_in - self._bytes_out
                if backlog > 0 and backlog + size > self.max_queue_bytes:
                    self._drop(exchange, "capture queue holds too many bytes")
                    return
                self._bytes_in += size
                self._queue.put(exchange)
        except Exception as exc:  # the hot path must never raise: the call is lost, so it is counted
            self._submit_failed += 1
            if self._submit_failed == 1 or self._submit_failed % 1000 == 0:  # a defect must not flood the log
                log.error(
                    "capture dropped call %s: submitting it failed (%s: %s); %d calls lost so",
                    getattr(exchange, "id", "?"),
                    type(exc).__name__,
                    exc,
                    self._submit_failed,
                )
            self._drop(exchange, "submitting it failed", quiet=True)

    def count_dropped(self, n: int, why: str) -> None:
        """Record ``n`` calls dropped before they reached this writer (a full spool, the proxy's full
        queue) in ``store_events`` with the next commit, so that ``ctxscope db status`` shows them
        after the daemon stopped too. Called by the submitting thread; they are not in ``dropped``
        of ``stats()``, which counts the calls this writer was given."""
        self._dropped_before += n
        self._last_error = why

    @property
    def _drops(self) -> int:
        return self._dropped + self._dropped_before

    def _drop(self, exchange: Exchange, why: str, *, quiet: bool = False) -> None:
        n = next(self._drop_counter)
        self._dropped = max(self._dropped, n)
        self._last_error = why
        if not quiet and (n == 1 or n % 1000 == 0):  # a full queue drops many: do not flood the log
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
            self._publisher = StatusPublisher(self.db_path, self.stats, give_back_heap=True)

    def stop(self, timeout: float = 30) -> bool:
        """Stop accepting, store everything queued, close. True when everything was stored or counted."""
        self._accepting = False
        thread = self._thread
        try:
            if thread is None or not thread.is_alive():
                return self._queue.empty() and not self._pending
            self._stopping.set()
            self._queue.put(STOP_MARK)
            thread.join(timeout)
            if thread.is_alive():
                log.error(
                    "capture writer did not drain within %.1fs; %d calls still queued", timeout, self._queue.qsize()
                )
                return False
            return self._queue.empty() and not self._pending
        finally:
            if self._publisher is not None:
                self._publisher.publish()
                self._publisher.close()
                self._publisher = None

    def stats(self) -> WriterStats:
        return WriterStats(
            # never 0 while a call is stored; a queued deletion or release is not a call
            queued=max(0, self._queue.qsize() - self._requests) + len(self._pending) + self._storing,
            queued_bytes=max(0, self._bytes_in - self._bytes_out),
            **{k: self._counts[k] for k in _TALLIES},
            dropped=self._dropped,
            submit_failed=self._submit_failed,
            last_error=self._last_error,
            running=self._thread is not None and self._thread.is_alive(),
            store_failures=self._outage.failures,
            store_down_since=self._outage.since,
            asleep=False,  # a thread of this process: nothing to let go of between calls
        )

    def delete_session(self, session: str, timeout: float = 30.0) -> dict:
        """Delete a session in the writer thread, after the batch it is storing (see ``Writer``)."""
        if not self._accepting or self._thread is None or not self._thread.is_alive():
            raise WriterUnavailable("the capture writer is not running")
        request = Deletion(session)
        self._put_request(request)
        try:
            return request.done.result(timeout)
        except TimeoutError:
            request.done.cancel()
            raise WriterUnavailable(
                f"the capture writer did not get to the deletion within {timeout:.0f}s ({self._last_error or 'busy'})"
            ) from None

    def release_memory(self, full: bool = True) -> threading.Event:
        """Let go of what the next calls can rebuild (caches, the token engine), in the writer thread
        after what is queued; skipped if calls are queued behind it (docs/architecture.md, "Memory").
        ``full=False``: only shrink the caches to their settled size (a burst drained). The event is
        set once it is done or skipped (its count is in the counters by then)."""
        request = Release(full)
        self._put_request(request)
        return request.done

    def _put_request(self, request: Deletion | Release) -> None:
        with self._requests_lock:
            self._requests += 1
        self._queue.put(request)

    def _took_request(self) -> None:
        with self._requests_lock:
            self._requests -= 1

    @property
    def thread_id(self) -> int:
        """The storing thread's id for the scheduler (0 before it starts)."""
        return (self._thread.native_id or 0) if self._thread is not None else 0

    @property
    def store_down(self) -> bool:
        return self._outage.down

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        db: Db | None = None
        state: IngestState | None = None
        stopping = final = False
        try:
            while True:
                if db is None:
                    db = self._open()
                    self._ready.set()
                    if db is not None:
                        state = IngestState(
                            self.capture_epoch or 0, self.max_decoded_bytes, failures=self._failures(db)
                        )
                if db is not None:
                    assert state is not None  # set with db
                    if not self._pending:
                        item = self._take(block=not stopping)
                        if item is None:
                            break  # stopping, and everything is stored
                        if item is STOP_MARK:
                            stopping = True
                            continue
                        if isinstance(item, Deletion | Release):
                            self._took_request()
                        if isinstance(item, Deletion):
                            if not serve_deletion(db, item, state):
                                close_quietly(db)
                                db = None
                            continue
                        if isinstance(item, Release):
                            try:
                                self._release(db, state, item.full)
                            finally:
                                item.done.set()
                            continue
                        self._pending.append(item)
                    ok, saw_stop = self._safe_batch(db, state)
                    stopping = stopping or saw_stop
                    if ok:
                        continue
                    close_quietly(db)  # the store is unavailable: reconnect for the next attempt
                    db = None
                if final:
                    break
                if self._stopping.wait(self.retry_interval):
                    final = True  # asked to stop: one last attempt at once, then give up
            if db is not None:
                self._unrecorded.flush(db, self._drops, self._last_error)
        finally:
            self._accepting = False
            self._ready.set()
            self._leave(db)

    def _release(self, db: Db, state: IngestState | None, full: bool = True) -> None:
        """Let go of the caches (``release_memory``), unless calls are queued behind the request:
        they need them. A failure costs only the memory it would have given back."""
        if not self._queue.empty():
            return
        try:
            if not full:
                trim(state, self.analyzers)
                return
            release(db, state, self.analyzers)
        except Exception as e:
            log.warning("capture writer: letting go of its caches failed: %s", describe(e))
            return
        self._counts["idle_releases"] += 1

    def _failures(self, db: Db) -> RecentFailures:
        """The memory of failed bodies for a new connection (one that cannot be read starts from now)."""
        try:
            return stored_failures(db)
        except Exception:  # a store that fails here fails the batch too, and is retried
            return RecentFailures()

    def _open(self) -> Db | None:
        """Connect (creating and migrating the database if need be); None if the store is unavailable."""
        db = None
        try:
            db = store.open_handle(self.db_path, segment_texts=SegmentTexts)
            owner_only.private_store(self.db_path)
            if not self._started_recorded:
                if self.capture_epoch is None:
                    self.capture_epoch = store.next_capture_epoch(db)
                store.record_event(
                    db, "writer_woke" if self._woke else "writer_started", detail=f"capture_epoch {self.capture_epoch}"
                )
                self._started_recorded = True
            if self._outage.down and not self._pending and self._queue.empty():
                with db.atomic():  # nothing waits: this write alone says the store works again
                    record(db, self._outage.events(self._last_error), 0, self._last_error)
                self._outage.ended()
            return db
        except Exception as e:
            close_quietly(db)
            self._store_failed(e, opening=True)
            return None

    def _leave(self, db: Db | None) -> None:
        """The thread ends: say what could not be stored, keep it in a spool, close."""
        unstored = list(self._pending)
        while True:
            item = self._take()
            if item is None:
                break
            if isinstance(item, Deletion | Release):
                self._took_request()
            if isinstance(item, Deletion):
                item.done.set_exception(WriterUnavailable("the capture writer stopped"))
            elif isinstance(item, Release):
                item.done.set()
            elif item is not STOP_MARK:
                unstored.append(item)
        if unstored:
            self._pending.extend(unstored[len(self._pending) :])
            log.error(
                "capture writer stopping with %d calls unstored: the store is unavailable (%s)",
                len(unstored),
                self._last_error,
            )
            if self.keep_unstored:
                keep_leftovers(self.db_path, [pack(ex) for ex in unstored])
        if db is not None:
            with contextlib.suppress(Exception):
                store.record_event(db, "writer_stopped")
            close_quietly(db)

    def _take(self, block: bool = False) -> Queued | None:
        """The next queued item (None if empty and not blocking)."""
        try:
            return self._queue.get(block)
        except queue.Empty:
            return None

    def _store_failed(self, e: BaseException, *, opening: bool = False) -> None:
        """The store is unavailable: count it, say it, keep the calls."""
        self._last_error = describe(e)
        self._outage.failed(self._last_error, self.stats().queued, opening=opening)
