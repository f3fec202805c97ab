"""The daemon's side of the hand-over: what the proxy has finished and the writer child not taken.

Finished calls wait in ``Held`` for a pause in the traffic (:mod:`holding` says how long).
Handing over per call cost the proxy more than forwarding at a few thousand calls a second, and
a child woken in the middle of back-to-back streams added 0.2-0.3 ms to their time to first byte
(interleaved runs, 10 x 100 streams: +0.70 ms vs direct with a hand-over every 5 ms, +0.48 ms
with capture off; the minimal passthrough +0.53). ``take`` makes the held calls one ``Batch``,
the calls and the drops the child has not been told of, which becomes one ``Handover`` message.
The ledger of what the child took (``InFlight``) bounds the queue. A call refused (the queue is
full, the writer stopped) or lost to a defect in ``submit`` itself is dropped and counted, never
silently: the child records the drops in the store with its next commit (docs/architecture.md,
"A bounded spool").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxscope.inspector.writer.daemon_side.holding import HOLD_BYTES, HOLD_CALLS, MAX_HOLD, QUIET_GAP, Held
from ctxscope.inspector.writer.daemon_side.in_flight import InFlight
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.call_fields import call_size, pack
from ctxscope.inspector.writer.wire.messages import Handover
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")


@dataclass(frozen=True)
class Batch:
    """One hand-over's content: the calls held until now and the drops not yet told to the child."""

    calls: list[tuple]
    dropped: int

    def message(self, pause: bool) -> Handover:
        """``pause``: the traffic paused, so the child may store now (else it only spools)."""
        return Handover(pause, self.calls, self.dropped)

    @property
    def size(self) -> int:
        return sum(call_size(fields) for fields in self.calls)


class HandOver:
    """Held calls, the child's acknowledgements and the drops, for one writer. ``submit`` and the
    timer run on the proxy's loop; the rest is called under the supervisor's ``lock`` (``stop``
    and the restarts run in other threads). ``flush(pause)`` is the supervisor's: where a batch
    goes depends on its child's phase."""

    def __init__(self, max_queue: int, max_queue_bytes: int, lock: threading.Lock, flush: Callable[[bool], None]):
        self.max_queue, self.max_queue_bytes = max_queue, max_queue_bytes
        self.lock, self.flush = lock, flush
        self.loop: asyncio.AbstractEventLoop | None = None  # the submitting loop, to hand over after a restart
        self._timer = False  # a check of the held calls is scheduled on the loop
        self.held = Held(QUIET_GAP, MAX_HOLD, HOLD_CALLS, HOLD_BYTES)
        self.in_flight = InFlight()  # calls the child has not counted yet
        self.dropped = 0  # calls dropped on this side, ever
        self.submit_failed = 0  # of those: lost to a failure of ``submit`` itself (a defect)
        self._told = 0  # of the dropped, how many the child was told (it records them in the store)
        self._drops = itertools.count(1)

    def submit(self, exchange: Exchange, accepting: bool) -> None:
        """Hold the exchange for the next hand-over; never blocks, never raises: a call it fails on
        is dropped and counted (``submit_failed``), with one line in the log. The held calls go
        once no call finished for QUIET_GAP, the oldest waited MAX_HOLD, or they are many."""
        try:
            size = len(exchange.request_body) + len(exchange.response_body)
            why = self.refusal(size) if accepting else "capture writer is not running"
            if why is not None:
                return self.drop(exchange.id, why)
            if self.loop is None:
                with contextlib.suppress(RuntimeError):
                    self.loop = asyncio.get_running_loop()
            with self.lock:
                full = self.hold(exchange, size, time.monotonic())
                if self._timer and not full:
                    return
            if full:
                return self.flush(False)
            try:
                asyncio.get_running_loop().call_later(QUIET_GAP, self._check)
                self._timer = True
            except RuntimeError:  # no event loop in this thread: hand it over now
                self.flush(True)
        except Exception as exc:  # the hot path must never raise: the call is lost, so it is counted
            with self.lock:
                self.failed(getattr(exchange, "id", "?"), exc)

    def _check(self) -> None:
        """Timer: hand over in a pause (or when held long enough), else look again when that may be."""
        now = time.monotonic()
        wait = self.held.wait(now)
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._check)
            return
        self._timer = False
        self.flush(now - self.held.last >= QUIET_GAP)

    def refusal(self, size: int) -> str | None:
        """Why a call of ``size`` body bytes cannot be taken now (the queue is full), or None."""
        if len(self.in_flight.unacked) >= self.max_queue:
            return "capture queue is full"
        if self.in_flight.unacked and self.in_flight.unacked_bytes + size > self.max_queue_bytes:
            return "capture queue holds too many bytes"
        return None

    def hold(self, exchange: Exchange, size: int, now: float) -> bool:
        """Hold a finished call for the next hand-over; True when the held calls are due at once."""
        fields = pack(exchange)  # before the ledger: a call that cannot be packed is not counted as sent
        self.in_flight.add(size, exchange.id)
        self.held.add(fields, size, now)
        return self.held.full()

    def pending(self) -> bool:
        """Calls held, or drops not yet told to the child: a child has something to do."""
        return bool(self.held.items) or self.dropped != self._told

    def take(self) -> Batch | None:
        """What the next hand-over carries (None: nothing)."""
        batch = Batch(self.held.take(), self.dropped - self._told)
        return batch if batch.calls or batch.dropped else None

    def sent(self, batch: Batch) -> None:
        """The batch went to the child: its drops are told."""
        self._told += batch.dropped

    def put_back(self, batch: Batch) -> None:
        """The child was gone: the batch's calls are first in line again (its drops are still untold)."""
        self.held.put_back(batch.calls, batch.size)

    def keep_leftovers(self, db_path: Path) -> int:
        """The held calls no child will take (stopping without one) go to a spool for the next
        writer; returns how many were lost instead (the spool could not be written)."""
        items = self.held.take()
        if spools.keep_leftovers(db_path, items) is not None:
            return 0
        self.in_flight.forget_newest(len(items))
        log.error("capture writer had exited: %d calls could not be stored", len(items))
        return len(items)

    def drop(self, call_id: str, why: str) -> None:
        """A call refused: counted (and told to the child), logged once per thousand."""
        n = self._count()
        if n == 1 or n % 1000 == 0:
            log.error("capture dropped call %s: %s (%d dropped so far)", call_id, why, n)

    def failed(self, call_id: str, exc: BaseException) -> None:
        """``submit`` itself failed on a call (a defect, never input the proxy forwarded): the call is
        lost, so it is dropped and counted like a refused one, and said in one line (the first
        failure, then one in a thousand: a defect that fails every call must not flood the log)."""
        self._count()
        self.submit_failed += 1
        if self.submit_failed == 1 or self.submit_failed % 1000 == 0:
            log.error(
                "capture dropped call %s: submitting it failed (%s: %s); %d calls lost so",
                call_id,
                type(exc).__name__,
                exc,
                self.submit_failed,
            )

    def _count(self) -> int:
        self.dropped = next(self._drops)
        return self.dropped
