"""The capture writer in a child process, so storing and analysing never competes with forwarding.

In one process the writer thread shares the GIL with the proxy's event loop: parsing a stream or
counting tokens for one call delays the next chunk of another. Here the proxy only hands
finished exchanges to a pipe: a feeder thread writes them in the spool's own record format, the
bodies straight from the proxy's buffers (:mod:`~ctxscope.inspector.writer.daemon_side.launch`, which also says
why a thread). A child process (``python -m ctxscope.inspector.writer.child.entry``, running
:mod:`~ctxscope.inspector.writer.child.life`) appends each hand-over to its spool as it came and stores
the calls, at a low CPU priority, when the traffic pauses. No multiprocessing: no resource tracker
process, no pickles (docs/architecture.md, "Messages between the writer and its child").

Finished calls also wait in the proxy for a pause: ``submit`` only appends a compact tuple to a
list, and the list goes to the pipe (one encoding of the calls' fields, one ``writev``, one wake of
the child) once no call has finished for QUIET_GAP, or the oldest has waited MAX_HOLD, or the list holds HOLD_CALLS
calls or HOLD_BYTES bytes. An agent pauses between calls far longer than QUIET_GAP, so its calls
are handed over 50 ms after they finish; during a burst the proxy only appends to a list. Handing over per call
cost the proxy more than forwarding at a few thousand calls a second, and a child woken in the
middle of back-to-back streams added 0.2-0.3 ms to their time to first byte (interleaved runs,
10 x 100 streams: +0.70 ms vs direct with a hand-over every 5 ms, +0.48 ms with capture off; the
minimal passthrough +0.53). Checking the child's liveness and reading its counters happen once
per hand-over too.

Promises kept from the in-thread writer: ``submit`` never blocks or raises; ``stop`` drains
everything held, spooled and queued; if the proxy is killed, the child stores what it received
and exits (its inbox pipe ends: only the proxy held the other end); if both are killed, the next
writer on the database stores what the spool holds. Only what the proxy still held dies with it:
at most MAX_HOLD seconds of calls, so a call that finished more than a second before a SIGKILL is
stored. If the child dies alone (the OOM killer, a crash), the proxy keeps its calls and starts a
new child, which stores the old one's spool.

A child that has stored everything and heard nothing for ``idle_release`` seconds lets go of its
caches and says so in its counters; if nothing is on its way to it then, the writer tells it to
stop (it exits like at ``stop``: nothing is left to store) and is *asleep*: an idle daemon holds
no child process at all. The next call starts a new child as it begins (``expect``, which the
proxy calls with each request), or else as it is held for a hand-over, and the hand-over waits
for it as it waits during a restart; the new child continues the same capture epoch (the capture
never paused: no call sees a ``capture_resumed`` epoch). A deletion or ``stop`` that finds it
asleep starts one too when it has something to do (docs/architecture.md, "Memory").

The counters never hide a dead child: a child that dies or will not start counts as a store
failure with its exit code as the last error, ``running`` is false until a new one runs, and
``restarts`` counts the new ones (:mod:`~ctxscope.inspector.writer.daemon_side.restart` says when). ``start``
does not fail when the child cannot start: the proxy forwards regardless, holds calls (up to
``max_queue`` / ``max_queue_bytes``) and tries again; at stop, calls no child took are written to
a spool for the next writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ctxscope.inspector.clock import now_iso
from ctxscope.inspector.writer.daemon_side.holding import HOLD_BYTES, HOLD_CALLS, MAX_HOLD, QUIET_GAP, Held
from ctxscope.inspector.writer.daemon_side.in_flight import InFlight
from ctxscope.inspector.writer.daemon_side.launch import ChildProcess, Outbox
from ctxscope.inspector.writer.daemon_side.restart import (
    RESTART_BACKOFF,
    RestartPolicy,
    add_lives,
    child_reply,
    recovered_ids,
)
from ctxscope.inspector.writer.priority import IDLE_CLASS, leave_idle_class
from ctxscope.inspector.writer.protocol import IDLE_RELEASE, RETRY_INTERVAL, WriterUnavailable
from ctxscope.inspector.writer.status import StatusPublisher, WriterStats
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.messages import (
    Counters,
    Deleted,
    DeleteSession,
    Failed,
    FromChild,
    Handover,
    Ready,
    Stop,
    Taken,
)
from ctxscope.inspector.writer.wire.spool import SPOOL_LIMIT
from ctxscope.inspector.writer.wire.spool_format import call_size, pack
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE

log = logging.getLogger("ctxscope.store")

# Silence from the proxy this long means it holds nothing: the child may take it as a pause.
CHILD_QUIET_AFTER = MAX_HOLD + QUIET_GAP + 0.2
RETIRE_WAIT = 30.0  # seconds a child told to stop after an idle spell may take to exit

class WriterProcess:
    """ExchangeSink whose storage runs in a child process (see module docstring)."""

    def __init__(self, db_path: str | Path, *, analyzers_factory: str | None = None,
                 analyzers_args: tuple[str, ...] = (), nice: int = 10,
                 max_queue: int = 10000, max_queue_bytes: int = 256 << 20, batch_interval: float = 0.2,
                 max_decoded_bytes: int = DEFAULT_MAX_SIZE, retry_interval: float = RETRY_INTERVAL,
                 status_file: bool = True, max_spool_bytes: int = SPOOL_LIMIT, idle_release: float = IDLE_RELEASE):
        self.db_path = Path(db_path)
        self.idle_release = idle_release  # idle seconds before the child lets go of its caches
        self.max_spool_bytes = max_spool_bytes
        self.max_decoded_bytes = max_decoded_bytes
        self.retry_interval = retry_interval
        self.status_file = status_file
        self._publisher: StatusPublisher | None = None
        self.on_stored: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the submitting loop, to hand over after a restart
        self._error: str | None = None  # why the child is not running, when it is not
        self._error_since: str | None = None
        self._child_failures = 0  # children that died or would not start
        self._seen_dead: ChildProcess | None = None  # the dead child already counted
        self.analyzers_factory = analyzers_factory  # "module:function", imported in the child
        self.analyzers_args = analyzers_args  # what that function is called with
        self.nice = nice
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.batch_interval = batch_interval
        self.capture_epoch: int | None = None
        self._proc: ChildProcess | None = None
        self._queue: Outbox | None = None  # to the child (written by a feeder thread)
        self._replies: queue.Queue[FromChild] | None = None  # from the child (read by a thread)
        self._accepting = False
        self._in_flight = InFlight()  # calls the child has not counted yet
        self._lock = threading.Lock()  # submit runs on the loop thread, stop in another
        self._held = Held(QUIET_GAP, MAX_HOLD, HOLD_CALLS, HOLD_BYTES)
        self._timer = False  # a check of the held calls is scheduled on the loop
        self._drops = itertools.count(1)
        self._dropped = 0
        self._dropped_sent = 0  # of those, told to the child (which records them in the store)
        self._child = WriterStats()
        self._base = WriterStats()  # what children that died had done
        self._restarting = False
        self._asleep = False  # the child stopped after an idle spell; the next request or hand-over starts one
        self._deleting = 0  # deletions waiting for the child's answer: it is not let go meanwhile
        self._policy = RestartPolicy()
        self._lost = 0  # calls that died in the pipe to a child that died
        self._unconfirmed: list[tuple[int, str]] = []  # sent to children that died before a successor said
        self.restarts = 0
        self._requests = itertools.count(1)
        self._deleted: dict[int, Deleted] = {}  # answers to deletions, until their caller takes them

    def start(self, timeout: float = 60) -> None:
        """Start the child; if it cannot start, say so loudly and keep trying (calls are held meanwhile)."""
        try:
            self._spawn(timeout)
        except RuntimeError as exc:
            self._start_failed(exc, "%s: calls are held in memory and a new writer is tried every %.0f s")
        self._accepting = True
        if self.status_file:
            self._publisher = StatusPublisher(self.db_path, self.stats)

    def _start_failed(self, exc: RuntimeError, message: str) -> None:
        with self._lock:
            self._count_failure(str(exc))
        log.error(message, exc, RESTART_BACKOFF)
        self._policy.failed_to_start(time.monotonic())

    def _count_failure(self, why: str) -> None:
        self._child_failures += 1
        self._error = why
        self._error_since = self._error_since or now_iso()
        self._base = dataclasses.replace(self._base, last_error=why)  # stays the last error once a new child runs

    def _note_death(self) -> None:
        """Count a child found dead (once), and start a new one if it is time."""
        proc = self._proc
        if proc is None or self._restarting or self._asleep or not self._accepting or proc.is_alive():
            return  # (a child ending after stop() is no failure)
        with self._lock:  # stats() may run in several threads at once
            if self._seen_dead is not proc and proc.exitcode is not None:
                self._seen_dead = proc
                if self._error is None or "could not start" not in self._error:
                    self._count_failure(f"capture writer exited with code {proc.exitcode}")
                self._policy.died(time.monotonic())
        if self._accepting and self._policy.due(time.monotonic()):
            self._begin_restart()

    def _spawn(self, timeout: float, capture_epoch: int | None = None) -> None:
        """Start a child and wait until it is ready; raises RuntimeError if it cannot start.
        ``capture_epoch``: the epoch it continues (after an idle spell); None: it takes a new one."""
        config = {"factory": self.analyzers_factory, "factory_args": list(self.analyzers_args), "nice": self.nice,
                  "batch_interval": self.batch_interval, "idle_class": IDLE_CLASS, "quiet_after": CHILD_QUIET_AFTER,
                  "max_decoded_bytes": self.max_decoded_bytes, "retry_interval": self.retry_interval,
                  "max_spool_bytes": self.max_spool_bytes, "idle_release": self.idle_release,
                  "capture_epoch": capture_epoch}
        try:
            self._proc = ChildProcess(str(self.db_path), config, on_exit=self._child_exited, on_idle=self._child_idle)
        except OSError as exc:  # no process could be made (no memory, too many processes)
            raise RuntimeError(f"capture writer could not start: {exc}") from exc
        self._queue, self._replies = self._proc.inbox, self._proc.replies
        reply = child_reply(self._replies, self._proc, timeout)  # a child that dies starting costs no timeout
        if not isinstance(reply, Ready):
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.close()
            why = reply.error if isinstance(reply, Failed) else f"it said {type(reply).__name__} first"
            raise RuntimeError(f"capture writer could not start: {why}")
        self._policy.started(time.monotonic())
        self.capture_epoch, store_error = reply.capture_epoch, reply.store_error
        self._error = self._error_since = None
        if store_error is not None:  # until the child's first counters arrive
            self._child = WriterStats(
                running=True, store_failures=1, last_error=store_error, store_down_since=now_iso()
            )

    def _child_exited(self) -> None:
        """Wake the status publisher when the child ends: an idle one sleeps until something changes."""
        publisher = self._publisher
        if publisher is not None:
            publisher.wake()

    def _child_idle(self, proc: ChildProcess, counters: Counters) -> None:
        """The child let go of its caches after an idle spell (its reader thread says so): if all
        it took is stored and nothing is on its way to it, tell it to stop. Stopping behind every
        message already sent, it loses nothing; what is submitted from now on is held until
        ``_flush`` starts a new child."""
        with self._lock:
            if proc is not self._proc or self._asleep or self._restarting or not self._accepting or self._deleting:
                return
            self._poll_from(proc.replies)  # its acknowledgements: what it took is no longer on its way
            busy = self._in_flight.unacked or self._to_hand_over() or counters.stats.get("queued", 0)
            if busy or not proc.is_alive():
                return
            self._asleep = True
            self._seen_dead = proc  # its exit is no failure
            proc.inbox.put(Stop())

    def expect(self) -> None:
        """A call has begun (the proxy says so): an asleep writer starts its child now, so the child
        is ready by the time the call ends and is handed over. Never blocks, never raises."""
        if self._asleep and not self._restarting:  # (one attribute read per request while awake)
            self._wake()

    def _wake(self) -> None:
        """Start a new child if the writer is asleep (in a thread: this returns at once)."""
        if self._asleep:
            self._begin_restart(wake=True)

    def _to_hand_over(self) -> bool:
        """Calls held, or drops not yet told to the child: a child has something to do."""
        return bool(self._held.items) or self._dropped != self._dropped_sent

    def submit(self, exchange: Exchange) -> None:
        """Hold the exchange for the next hand-over (see module docstring); never blocks, never raises."""
        try:
            publisher = self._publisher
            if publisher is not None and publisher.asleep:
                publisher.wake()
            size = len(exchange.request_body) + len(exchange.response_body)
            if not self._accepting:
                return self._drop(exchange, "capture writer is not running")
            in_flight = self._in_flight
            if len(in_flight.unacked) >= self.max_queue:
                return self._drop(exchange, "capture queue is full")
            if in_flight.unacked and in_flight.unacked_bytes + size > self.max_queue_bytes:
                return self._drop(exchange, "capture queue holds too many bytes")
            if self._loop is None:
                with contextlib.suppress(RuntimeError):
                    self._loop = asyncio.get_running_loop()
            with self._lock:
                in_flight.add(size, exchange.id)
                self._held.add(pack(exchange), size, time.monotonic())
                full = self._held.full()
                if self._timer and not full:
                    return
            if full:
                return self._flush(pause=False)
            try:
                asyncio.get_running_loop().call_later(QUIET_GAP, self._check)
                self._timer = True
            except RuntimeError:  # no event loop in this thread: hand it over now
                self._flush(pause=True)
        except Exception:  # pragma: no cover - the hot path must never raise
            pass

    def _check(self) -> None:
        """Timer: hand over in a pause (or when held long enough), else look again when that may be."""
        now = time.monotonic()
        wait = self._held.wait(now)
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._check)
            return
        self._timer = False
        self._flush(pause=now - self._held.last >= QUIET_GAP)

    def _flush(self, pause: bool) -> None:
        """Send what is held as one batch, saying whether the traffic paused (the child may store
        now) or not (the child only spools it); once per batch, look at the child's state."""
        try:
            if self._restarting:  # the restart hands over what waits once the new child is ready
                return
            if self._asleep:  # a new child first; it is handed what waits once it is ready
                if self._to_hand_over():
                    self._wake()
                return
            with self._lock:
                batch = self._held.take()
            dropped = self._dropped - self._dropped_sent
            if not batch and not dropped:
                return
            assert self._proc is not None and self._queue is not None  # calls are held only once started
            if not self._proc.is_alive():
                self._hold_again(batch)
                return
            self._poll()
            self._queue.put(Handover(pause, batch, dropped))  # the child records the drops in the store
            self._dropped_sent += dropped
        except Exception:  # pragma: no cover - a timer callback must not raise into the loop
            log.exception("capture hand-over failed")

    def _hold_again(self, batch: list[tuple]) -> None:
        """The child is gone (killed, crashed): keep the batch, start a new child in a thread.

        The new child stores what the old one had spooled; only the calls that were still in the
        pipe to it are lost (counted as dropped)."""
        with self._lock:
            self._held.items[:0] = batch
            self._held.bytes += sum(call_size(f) for f in batch)
        self._note_death()

    def _begin_restart(self, wake: bool = False) -> None:
        with self._lock:
            if self._restarting or not self._accepting:
                return
            self._restarting = True
        try:
            threading.Thread(target=self._restart, args=(self._loop, wake), name="ctxscope-writer-restart",
                             daemon=True).start()
        except RuntimeError as exc:  # no thread could be started (a process at its limit): the next hand-over tries
            self._restarting = False
            log.error("capture writer: could not start a thread to start its child: %s", exc)

    def _restart(self, loop, wake: bool = False) -> None:
        """A new child after one died, or (``wake``) after one was let go in an idle spell."""
        try:
            old_proc, old_queue, old_replies = self._proc, self._queue, self._replies
            assert old_proc is not None and old_queue is not None and old_replies is not None  # it had started
            if wake:
                old_proc.join(RETIRE_WAIT)  # it had nothing left to store: it is exiting, if not gone
            old_proc.close()  # its last replies are read (its pipe has ended), its feeder gone
            with self._lock:
                self._asleep = False
                self._poll_from(old_replies)
                # The oldest unacknowledged calls went to the dead child: spooled, or lost in the pipe.
                sent = self._unconfirmed + self._in_flight.sent_to_child(held=len(self._held.items))
                # Its death, counted in _base already, is newer than any error the dead child reported.
                self._base = dataclasses.replace(add_lives(self._base, self._child),
                                                 last_error=self._base.last_error or self._child.last_error)
                self._child = WriterStats()
            try:
                self._spawn(timeout=60, capture_epoch=self.capture_epoch if wake else None)
            except RuntimeError as exc:
                self._start_failed(exc, "%s; trying again in %.0f s")
                self._unconfirmed = sent  # still in the dead child's spool, or not: the next child will say
                return
            if not wake:
                self.restarts += 1
            recovered = recovered_ids(
                self._replies, self._proc, timeout=60
            )  # the new child took over the dead one's spool
            if recovered is None:  # it died before it said what it found: ask the next one
                self._unconfirmed = sent
                return
            self._unconfirmed = []
            lost = sum(1 for _, call_id in sent if call_id not in recovered)
            self._lost += lost
            if wake and not lost:
                return
            log.error("capture writer exited with code %s; started a new one, which stores what it had spooled "
                      "(%d calls were lost on the way to it)", old_proc.exitcode, lost)
        finally:
            self._restarting = False
            if self._held.items:  # hand over what waited meanwhile (on the loop that submits, if any)
                if loop is not None:
                    loop.call_soon_threadsafe(self._flush, True)
                else:
                    self._flush(True)

    def _drop(self, exchange: Exchange, why: str) -> None:
        n = next(self._drops)
        self._dropped = n
        if n == 1 or n % 1000 == 0:
            log.error("capture dropped call %s: %s (%d dropped so far)", exchange.id, why, n)

    def _poll(self) -> None:
        """Take the child's latest counters and forget the calls it has safely spooled."""
        if not self._restarting:
            with self._lock:
                self._poll_from(self._replies)

    def _poll_from(self, replies) -> None:
        while True:
            try:
                reply = replies.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if isinstance(reply, Counters):
                stored = reply.stats.get("written", 0) > self._child.written
                self._child = WriterStats(**reply.stats)
                if stored and self.on_stored is not None:
                    self.on_stored()
                self._in_flight.counted(reply.received)
            elif isinstance(reply, Taken):
                self._in_flight.acknowledged(reply.received)
            elif isinstance(reply, Deleted):
                self._deleted[reply.request] = reply

    def delete_session(self, session: str, timeout: float = 30.0) -> dict:
        """Ask the child to delete a session (its writer thread does it between batches) and wait."""
        with self._lock:
            self._deleting += 1
        try:
            return self._delete_session(session, timeout)
        finally:
            with self._lock:
                self._deleting -= 1

    def _delete_session(self, session: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        self._wake()  # if asleep, the child that does the deletion starts now
        while self._restarting and self._accepting and time.monotonic() < deadline:
            time.sleep(0.02)
        proc, inbox = self._proc, self._queue
        if not self._accepting or self._restarting or proc is None or inbox is None or not proc.is_alive():
            raise WriterUnavailable("the capture writer is not running")
        request = next(self._requests)
        left = deadline - time.monotonic()
        inbox.put(DeleteSession(request, session, max(0.1, left - 1.0)))  # it answers before we give up
        while True:
            self._poll()
            with self._lock:
                answer = self._deleted.pop(request, None)
            if answer is not None:
                if answer.result is None:
                    raise WriterUnavailable(answer.error or "the deletion failed")
                return answer.result
            if not proc.is_alive() or time.monotonic() > deadline:
                raise WriterUnavailable("the capture writer did not answer the deletion"
                                        + ("" if proc.is_alive() else f": it exited with code {proc.exitcode}"))
            time.sleep(0.02)

    def stats(self) -> WriterStats:
        """The child's counters, with the calls this side still holds or has in flight counted as queued,
        and children that died or would not start counted as store failures."""
        self._note_death()
        self._poll()
        c = add_lives(self._base, self._child)  # counters of children that died are kept
        running = self._proc is not None and self._error is None and (
            self._restarting or self._asleep or self._proc.is_alive())
        return dataclasses.replace(
            c,
            queued=self._in_flight.queued + self._child.queued,
            queued_bytes=self._in_flight.queued_bytes + self._child.queued_bytes,
            dropped=c.dropped + self._dropped + self._lost,
            running=running,
            store_failures=c.store_failures + self._child_failures,
            last_error=self._error or c.last_error,
            store_down_since=c.store_down_since if running else (c.store_down_since or self._error_since),
            restarts=self.restarts,
            asleep=self._asleep,
        )

    def stop(self, timeout: float = 60) -> bool:
        """Stop accepting, let the child store everything held, spooled and queued, wait for it to exit."""
        self._accepting = False
        try:
            return self._stop(timeout)
        finally:
            if self._publisher is not None:
                self._publisher.publish()
                self._publisher.close()
                self._publisher = None

    def _stop(self, timeout: float) -> bool:
        if self._proc is None:
            return True
        while self._restarting:
            time.sleep(0.05)
        if self._asleep:
            if not self._to_hand_over():  # nothing came since it stopped
                self._proc.join(RETIRE_WAIT)
                self._proc.close()
                self._poll()
                return self._child.queued == 0
            self._restart(None, wake=True)  # a child to store what came since
        assert self._queue is not None and self._replies is not None  # made with the process
        leave_idle_class(self._proc.pid)  # draining is all that is left: a busy machine must not starve it
        self._flush(pause=True)
        if self._proc.is_alive():
            self._queue.put(Stop())
        deadline = time.monotonic() + timeout
        while self._proc.is_alive() and time.monotonic() < deadline:
            self._proc.join(0.1)
            self._poll()
        if not self._proc.is_alive():
            self._proc.close()  # its pipes are done with: its last counters are read
        self._poll()
        if self._held.items:  # the child had died and no new one could start
            with self._lock:
                items, self._held.items, self._held.bytes = self._held.items, [], 0
            if spools.keep_leftovers(self.db_path, items) is None:
                with self._lock:
                    self._in_flight.forget_newest(len(items))
                self._lost += len(items)
                log.error("capture writer had exited: %d calls could not be stored", len(items))
            return False
        if self._proc.is_alive():  # it ignores SIGTERM; what it has not stored is safe in its spool
            log.error("capture writer did not finish storing within %.0fs: stopped it; %d calls stay in its "
                      "spool and are stored when a writer next opens %s", timeout, self.stats().queued, self.db_path)
            self._proc.kill()
            self._proc.join(5)
            self._proc.close()
            return False
        return self._child.queued == 0  # else the store was unavailable: they wait in the spool
