"""The writer thread's batches: many calls in one transaction, and what happens when one fails.

The calls queued are stored in one transaction (``store_one`` without a savepoint of its own) and
committed when the queue is empty, after MAX_BATCH calls or after ``batch_interval``. If the store
is unavailable, the batch goes back to the front of the line and is retried later. A call that
fails while the transaction stays usable makes the batch roll back and be stored again, a
savepoint per call, so the failing one is rolled back alone, counted and recorded
(docs/architecture.md, "A savepoint only after a failure"). ``CaptureWriter`` (:mod:`thread`)
holds the queue and the counters these methods work on.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Final

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived import search
from ctxscope.inspector.store.ingest import Analyzer, IngestState
from ctxscope.inspector.writer.storing.failures import (
    Outage,
    Unrecorded,
    call_event,
    describe,
    record,
    store_unavailable,
)
from ctxscope.inspector.writer.storing.work import CallFailed, Deletion, store_one
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

MAX_BATCH = 500


class _Stop(enum.Enum):
    """STOP_MARK's type, of one value: ``item is STOP_MARK`` then tells the type checker what else an item is."""

    MARK = "stop"


STOP_MARK: Final = _Stop.MARK  # queued by stop(): everything before it is stored, then the thread ends


class Release:
    """Let go of the caches, if nothing else is queued (``release_memory``); ``done`` is set after."""

    def __init__(self, full: bool = True) -> None:
        self.full = full  # False: only shrink the caches to their settled size (``trim``)
        self.done = threading.Event()


Queued = Exchange | Deletion | Release | _Stop  # what the storing thread's queue holds


class BatchStoring:
    """The writer thread's batches, for ``CaptureWriter`` (which sets these attributes)."""

    batch_interval: float
    analyzers: tuple[Analyzer, ...]
    on_stored: Callable[[], None] | None
    _queue: queue.SimpleQueue[Queued]
    _pending: collections.deque[Exchange]
    _storing: int
    _isolate: int
    _counts: collections.Counter[str]
    _last_error: str | None
    _bytes_out: int
    _outage: Outage
    _unrecorded: Unrecorded

    @property
    def _drops(self) -> int:
        raise NotImplementedError

    def _take(self, block: bool = False) -> Queued | None:
        raise NotImplementedError

    def _took_request(self) -> None:
        raise NotImplementedError

    def _store_failed(self, e: BaseException, *, opening: bool = False) -> None:
        raise NotImplementedError

    def _safe_batch(self, db: Db, state: IngestState) -> tuple[bool, bool]:
        """Store a batch; (False if the store is unavailable, True if a stop marker was seen)."""
        try:
            return self._write_batch(db, state)
        except Exception as e:  # a bug in the batch logic itself: keep the thread alive
            log.exception("capture writer error")
            self._last_error = describe(e)
            with contextlib.suppress(Exception):
                db.rollback()
            state.forget()
            if store_unavailable(e):
                self._store_failed(e)
                return False, False
            if self._pending:  # the call it was on is given up, or the thread would loop on it
                self._done(self._pending.popleft())
                self._counts["failed"] += 1
            return True, False

    def _write_batch(self, db: Db, state: IngestState, more: bool = True) -> tuple[bool, bool]:
        """Store the pending calls and whatever else is queued in one transaction.

        Commits when the queue is empty, after MAX_BATCH calls or after ``batch_interval``. If the
        store is unavailable, the batch goes back to the front of the line. If the transaction
        fails otherwise, each call of the batch is retried in its own transaction.
        """
        batch: list[Exchange] = []
        nxt: Queued | None
        stopping = False
        outcome: collections.Counter[str] = collections.Counter()
        events: list[dict] = []
        down = self._outage.down
        outage = self._outage.events(self._last_error)
        pending = list(self._unrecorded.events)
        drops = self._drops - self._unrecorded.drops_recorded
        try:
            store.begin(db)
            if state.ids.check(db):  # another connection committed: what the writer knew may be gone
                state.redo.clear()  # ... and the analysis of a call stored again may have changed
            state.ids.defer_terms = True  # given to FTS5 once, before the commit
            state.ids.terms.clear()  # held back by a batch that rolled back: their segments are gone
            began = time.monotonic()
            while len(batch) < MAX_BATCH and (more or not batch):
                if self._pending:
                    nxt = self._pending.popleft()
                elif not batch or time.monotonic() - began < self.batch_interval:
                    nxt = self._take()
                    if nxt is None:
                        break
                    if nxt is STOP_MARK:
                        stopping = True
                        break
                    if isinstance(nxt, Release):  # calls came after it: they need the caches
                        self._took_request()
                        nxt.done.set()
                        continue
                    if isinstance(nxt, Deletion):  # after this batch's commit
                        self._queue.put(nxt)  # (behind what was queued meanwhile: a deletion is rare)
                        break
                else:
                    break
                batch.append(nxt)
                self._storing = len(batch)
                isolated = self._isolate > 0
                self._isolate -= isolated
                store_one(db, state, nxt, self.analyzers, outcome, events, isolated=isolated)
            search.flush_terms(db, state.ids)
            record(db, outage + pending + events, drops, self._last_error)
            store.commit(db)
        except CallFailed as e:
            # A call failed with no savepoint of its own: the batch goes back, first in line, and is
            # stored again with a savepoint per call; the analysis of each call it held is taken as it
            # was (docs/architecture.md, "A savepoint only after a failure").
            with contextlib.suppress(Exception):
                db.rollback()
            state.forget()
            state.redo = {ex.id for ex in batch}
            self._pending.extendleft(reversed(batch))
            self._storing = 0
            self._isolate = len(batch)
            log.info("call %s failed in a batch of %d: storing the batch again, call by call", e.call_id, len(batch))
            return True, stopping
        except Exception as e:
            with contextlib.suppress(Exception):
                db.rollback()
            state.forget()
            self._pending.extendleft(reversed(batch))  # first in line again, in order
            self._storing = 0
            if store_unavailable(e):
                self._store_failed(e)
                return False, stopping
            if len(batch) > 1:
                log.warning("capture batch of %d failed (%s); retrying call by call", len(batch), describe(e))
                for _ in batch:
                    ok, _saw = self._write_batch(db, state, more=False)
                    if not ok:
                        return False, stopping
            elif batch:
                self._fail(db, self._pending.popleft(), e)
            return True, stopping
        state.redo.clear()
        if down:
            self._outage.ended()
        self._unrecorded.recorded(len(pending), drops)
        for ex in batch:
            self._done(ex)
        outcome["commits"] = 1
        self._counts.update(outcome)
        self._storing = 0  # after the tallies: a status read between them counts the calls twice, never not at all
        if outcome.get("written") and self.on_stored is not None:
            self.on_stored()
        if events:
            self._last_error = events[-1]["detail"]
        return True, stopping

    def _done(self, ex: Exchange) -> None:
        self._bytes_out += exchange_size(ex)

    def _fail(self, db: Db, ex: Exchange, e: BaseException) -> None:
        """A call that could not be stored even alone: count, log, and record it when possible."""
        log.error("capture of call %s failed: %s", ex.id, describe(e))
        self._done(ex)
        self._counts["failed"] += 1
        self._last_error = describe(e)
        self._unrecorded.add(call_event("write_failed", ex, self._last_error))
        self._unrecorded.flush(db, self._drops, self._last_error)


def close_quietly(db: Db | None) -> None:
    if db is not None:
        with contextlib.suppress(Exception):
            db.close()


def exchange_size(ex: Exchange) -> int:
    return len(ex.request_body) + len(ex.response_body)
