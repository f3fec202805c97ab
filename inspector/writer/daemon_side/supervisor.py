"""The capture writer in a child process, so storing and analysing never competes with forwarding.

In one process the writer thread shares the GIL with the proxy's event loop: parsing a stream or
counting tokens for one call delays the next chunk of another. Here the proxy only holds finished
exchanges (:mod:`~ctxscope.inspector.writer.daemon_side.handover`) and hands them to a pipe in a
pause: a feeder thread writes them in the spool's own record format, the bodies straight from the
proxy's buffers (:mod:`~ctxscope.inspector.writer.daemon_side.launch`, which also says why a
thread). A child process (``python -m ctxscope.inspector.writer.child.entry``) appends each
hand-over to its spool as it came and stores the calls, at a low CPU priority, when the traffic
pauses. No multiprocessing: no resource tracker process, no pickles (docs/architecture.md,
"Messages between the writer and its child").

Promises kept from the in-thread writer: ``submit`` never blocks or raises (a call it fails on
is counted as dropped); ``stop`` drains everything held, spooled and queued; if the proxy is
killed, the child stores what it received and exits (its inbox pipe ends); if both are killed,
the next writer on the database stores what the spool holds. Only what the proxy still held dies
with it: at most MAX_HOLD seconds of calls. If the child dies alone (the OOM killer, a crash), the
proxy keeps its calls and starts a new child, which stores the old one's spool.

The supervisor's life is a ``Phase`` (docs/architecture.md, "The writer's supervisor"): RUNNING
while a child runs; DOWN once one died or would not start (a failure in the counters, its exit
code the last error) until :mod:`~ctxscope.inspector.writer.daemon_side.restart` says a new one
is due; RESTARTING while a thread starts it; ASLEEP once a child that stored everything and let
go of its caches was told to stop, so an idle daemon holds no child process. The next call wakes
it as it begins (``expect``) or as it is held; the new child continues the same capture epoch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ctxscope.inspector.base.clock import now_iso
from ctxscope.inspector.writer.daemon_side.handover import Batch, HandOver
from ctxscope.inspector.writer.daemon_side.holding import MAX_HOLD, QUIET_GAP
from ctxscope.inspector.writer.daemon_side.launch import ChildProcess, Outbox
from ctxscope.inspector.writer.daemon_side.phase import Phase, SupervisorPhase
from ctxscope.inspector.writer.daemon_side.replies import ChildReplies
from ctxscope.inspector.writer.daemon_side.restart import RESTART_BACKOFF, RestartPolicy, await_ready, recovered_ids
from ctxscope.inspector.writer.priority import IDLE_CLASS, leave_idle_class
from ctxscope.inspector.writer.protocol import IDLE_RELEASE, RETRY_INTERVAL, WriterUnavailable
from ctxscope.inspector.writer.status import StatusPublisher, WriterStats
from ctxscope.inspector.writer.wire.messages import Counters, FromChild, Stop
from ctxscope.inspector.writer.wire.spool import SPOOL_LIMIT
from ctxscope.inspector.writer.wire.spool_room import RESERVE
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE

log = logging.getLogger("ctxscope.store")

# Silence from the proxy this long means it holds nothing: the child may take it as a pause.
CHILD_QUIET_AFTER = MAX_HOLD + QUIET_GAP + 0.2
RETIRE_WAIT = 30.0  # seconds a child told to stop after an idle spell may take to exit


class WriterProcess:
    """ExchangeSink whose storing runs in a child process (see module docstring)."""

    def __init__(
        self,
        db_path: str | Path,
        *,
        analyzers_factory: str | None = None,
        analyzers_args: tuple[str, ...] = (),
        nice: int = 10,
        max_queue: int = 10000,
        max_queue_bytes: int = 256 << 20,
        batch_interval: float = 0.2,
        max_decoded_bytes: int = DEFAULT_MAX_SIZE,
        retry_interval: float = RETRY_INTERVAL,
        status_file: bool = True,
        max_spool_bytes: int = SPOOL_LIMIT,
        spool_disk_reserve: int = RESERVE,
        idle_release: float = IDLE_RELEASE,
    ):
        self.db_path = Path(db_path)
        self.status_file = status_file
        self.on_stored: Callable[[], None] | None = None
        self.capture_epoch: int | None = None
        self.restarts = 0
        # What the child is started with (see ``_config``); the factory is "module:function".
        self.analyzers_factory, self.analyzers_args, self.nice = analyzers_factory, analyzers_args, nice
        self.batch_interval, self.max_decoded_bytes, self.retry_interval = (
            batch_interval,
            max_decoded_bytes,
            retry_interval,
        )
        self.max_spool_bytes, self.idle_release = max_spool_bytes, idle_release
        self.spool_disk_reserve = spool_disk_reserve
        self._phase = SupervisorPhase()  # its moves are made under _lock
        self.accepting = False  # submit() takes calls: from start() until stop()
        self._lock = threading.Lock()  # submit runs on the loop thread, stop and the restarts in others
        self._handover = HandOver(max_queue, max_queue_bytes, self._lock, self._flush)
        self._heard = ChildReplies(self._handover.in_flight, lambda: self.on_stored and self.on_stored())
        self._replies: queue.Queue[FromChild] | None = None  # from the child (read by a thread)
        self._deleting = 0  # deletions waiting for the child's answer: it is not let go meanwhile
        self._publisher: StatusPublisher | None = None
        self._proc: ChildProcess | None = None
        self._queue: Outbox | None = None  # to the child (written by a feeder thread)
        self._error: str | None = None  # why no child runs, while none does
        self._error_since: str | None = None
        self._child_failures = 0  # children that died or would not start
        self._policy = RestartPolicy()
        self._lost = 0  # calls that died in the pipe to a child that died
        self._unconfirmed: list[tuple[int, str]] = []  # sent to children that died before a successor said

    @property
    def phase(self) -> Phase:
        return self._phase.now

    def _start_failed(self, exc: RuntimeError, message: str) -> None:
        """NEW or RESTARTING -> DOWN: no child could be started; the next try waits RESTART_BACKOFF."""
        with self._lock:
            self._phase.move("start_failed")
            self._count_failure(str(exc))
        log.error(message, exc, RESTART_BACKOFF)
        self._policy.failed_to_start(time.monotonic())

    def _count_failure(self, why: str) -> None:
        self._child_failures += 1
        self._error = why
        self._error_since = self._error_since or now_iso()
        self._heard.child_failed(why)

    # -- starting a child ------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        """Start the child; if it cannot start, say so loudly and keep trying (calls are held meanwhile)."""
        try:
            self._spawn(timeout)
        except RuntimeError as exc:
            self._start_failed(exc, "%s: calls are held in memory and a new writer is tried every %.0f s")
        else:
            self._phase.move("started")
        self.accepting = True
        if self.status_file:
            self._publisher = StatusPublisher(self.db_path, self.stats)

    def _config(self, capture_epoch: int | None) -> dict:
        return {
            "factory": self.analyzers_factory,
            "factory_args": list(self.analyzers_args),
            "nice": self.nice,
            "batch_interval": self.batch_interval,
            "idle_class": IDLE_CLASS,
            "quiet_after": CHILD_QUIET_AFTER,
            "max_decoded_bytes": self.max_decoded_bytes,
            "retry_interval": self.retry_interval,
            "max_spool_bytes": self.max_spool_bytes,
            "spool_disk_reserve": self.spool_disk_reserve,
            "idle_release": self.idle_release,
            "capture_epoch": capture_epoch,
        }

    def _spawn(self, timeout: float, capture_epoch: int | None = None) -> ChildProcess:
        """Start a child and wait until it is ready (it is returned); raises RuntimeError if it cannot start.
        ``capture_epoch``: the epoch it continues (after an idle spell); None: it takes a new one."""
        try:
            self._proc = ChildProcess(
                str(self.db_path), self._config(capture_epoch), on_exit=self._child_exited, on_idle=self._child_idle
            )
        except OSError as exc:  # no process could be made (no memory, too many processes)
            raise RuntimeError(f"capture writer could not start: {exc}") from exc
        self._queue, self._replies = self._proc.inbox, self._proc.replies
        reply = await_ready(self._proc, timeout)
        self._policy.started(time.monotonic())
        self.capture_epoch, store_error = reply.capture_epoch, reply.store_error
        self._error = self._error_since = None
        self._heard.child_starting(store_error)
        return self._proc

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
            if proc is not self._proc or self.phase is not Phase.RUNNING or not self.accepting or self._deleting:
                return
            self._heard.take(proc.replies)  # its acknowledgements: what it took is no longer on its way
            busy = self._handover.in_flight.unacked or self._handover.pending() or counters.stats.get("queued", 0)
            if not busy and proc.is_alive():
                self._phase.move("fell_asleep")  # its exit is no failure
                proc.inbox.put(Stop())

    def _note_death(self) -> None:
        """Count a child found dead (once), and start a new one if it is time."""
        if not self.accepting:
            return  # (a child ending after stop() is no failure)
        proc = self._proc
        if self.phase is Phase.RUNNING and proc is not None and not proc.is_alive():
            with self._lock:  # stats() may run in several threads at once
                if self.phase is Phase.RUNNING and proc is self._proc:
                    self._phase.move("died")  # counted once: only this move counts a death
                    self._count_failure(f"capture writer exited with code {proc.exitcode}")
                    self._policy.died(time.monotonic())
        if self.phase is Phase.DOWN and self._policy.due(time.monotonic()):
            self._begin_restart()

    def expect(self) -> None:
        """A call has begun (the proxy says so): an asleep writer starts its child now, so the child
        is ready by the time the call ends and is handed over. Never blocks, never raises."""
        if self.phase is Phase.ASLEEP:  # (one attribute read per request while awake)
            self._begin_restart()

    def _begin_restart(self) -> None:
        """Start a new child in a thread (this returns at once): after a death, or waking."""
        with self._lock:
            if self.phase not in (Phase.DOWN, Phase.ASLEEP) or not self.accepting:
                return
            wake = self._phase.move("restarting") is Phase.ASLEEP
        try:
            threading.Thread(
                target=self._restart, args=(self._handover.loop, wake), name="ctxscope-writer-restart", daemon=True
            ).start()
        except RuntimeError as exc:  # no thread could be started (a process at its limit): the next hand-over tries
            with self._lock:
                self._phase.back(Phase.ASLEEP if wake else Phase.DOWN)
            log.error("capture writer: could not start a thread to start its child: %s", exc)

    def _restart(self, loop: asyncio.AbstractEventLoop | None, wake: bool) -> None:
        """RESTARTING -> RUNNING (or DOWN): a new child after one died, or (``wake``) after one was
        let go in an idle spell."""
        old_proc, old_replies = self._proc, self._replies
        ok = False
        try:
            if old_proc is not None:
                if wake:
                    old_proc.join(RETIRE_WAIT)  # it had nothing left to store: it is exiting, if not gone
                old_proc.close()  # its last replies are read (its pipe has ended), its feeder gone
            with self._lock:
                self._heard.take(old_replies)
                # The oldest unacknowledged calls went to the dead child: spooled, or lost in the pipe.
                sent = self._unconfirmed + self._handover.in_flight.sent_to_child(held=len(self._handover.held))
                self._heard.retire_child()
            try:
                proc = self._spawn(timeout=60, capture_epoch=self.capture_epoch if wake else None)
            except RuntimeError as exc:
                self._start_failed(exc, "%s; trying again in %.0f s")
                self._unconfirmed = sent  # still in the dead child's spool, or not: the next child will say
                return
            ok = True
            if not wake:
                self.restarts += 1
            self._count_lost(
                sent,
                recovered_ids(proc.replies, proc, timeout=60),
                wake,
                old_proc.exitcode if old_proc is not None else None,
            )
        finally:
            with self._lock:
                if ok:
                    self._phase.move("restarted")
                elif self.phase is Phase.RESTARTING:  # an unforeseen error: tried again when the policy says
                    self._phase.move("start_failed")
            if len(self._handover.held):  # hand over what waited meanwhile (on the loop that submits, if any)
                if loop is not None:
                    loop.call_soon_threadsafe(self._flush, True)
                else:
                    self._flush(True)

    def _count_lost(
        self, sent: list[tuple[int, str]], recovered: set[str] | None, wake: bool, exitcode: int | None
    ) -> None:
        """The calls sent to the old child that the new one did not find in its spool died in the pipe."""
        if recovered is None:  # it died before it said what it found: ask the next one
            self._unconfirmed = sent
            return
        self._unconfirmed = []
        lost = sum(1 for _, call_id in sent if call_id not in recovered)
        self._lost += lost
        if not wake or lost:
            log.error(
                "capture writer exited with code %s; started a new one, which stores what it had spooled "
                "(%d calls were lost on the way to it)",
                exitcode,
                lost,
            )

    # -- the sink: holding and handing over ----------------------------------------------------

    def submit(self, exchange: Exchange) -> None:
        """Hold the exchange for the next hand-over (``HandOver.submit``); never blocks, never raises."""
        publisher = self._publisher
        if publisher is not None and publisher.asleep:
            publisher.wake()
        self._handover.submit(exchange, self.accepting)

    def _flush(self, pause: bool) -> None:
        """Send what is held as one hand-over, saying whether the traffic paused (the child may store
        now) or not (the child only spools it); once per hand-over, look at the child's state."""
        try:
            if self.phase is Phase.RESTARTING:  # the restart hands over what waits once the new child is ready
                return
            if self.phase is Phase.ASLEEP:  # a new child first; it is handed what waits once it is ready
                if self._handover.pending():
                    self._begin_restart()
                return
            self._poll()  # before the batch is taken: nothing between taking and sending it can fail
            with self._lock:
                batch = self._handover.take()
            if batch is None:
                return
            if self._proc is None or self._queue is None or not self._proc.is_alive():
                self._hold_again(batch)
                return
            self._queue.put(batch.message(pause))  # the child records the drops in the store
            self._handover.sent(batch)
        except Exception:  # pragma: no cover - a timer callback must not raise into the loop
            log.exception("capture hand-over failed")

    def _hold_again(self, batch: Batch) -> None:
        """The child is gone (killed, crashed): keep the batch, start a new child in a thread. The
        new child stores what the old one had spooled; only the calls that were still in the pipe
        to it are lost (counted as dropped)."""
        with self._lock:
            self._handover.put_back(batch)
        self._note_death()

    # -- counters and stopping -----------------------------------------------------------------

    def stats(self) -> WriterStats:
        """The child's counters, with the calls this side still holds or has in flight counted as queued,
        and children that died or would not start counted as store failures."""
        self._note_death()
        self._poll()
        c, child = self._heard.lives(), self._heard.child  # counters of children that died are kept
        proc, phase, ledger = self._proc, self.phase, self._handover.in_flight
        running = (
            proc is not None and self._error is None and (phase in (Phase.RESTARTING, Phase.ASLEEP) or proc.is_alive())
        )
        return dataclasses.replace(
            c,
            queued=ledger.queued + child.queued,
            queued_bytes=ledger.queued_bytes + child.queued_bytes,
            dropped=c.dropped + self._handover.dropped + self._lost,
            submit_failed=self._handover.submit_failed,
            running=running,
            store_failures=c.store_failures + self._child_failures,
            last_error=self._error or c.last_error,
            store_down_since=c.store_down_since if running else (c.store_down_since or self._error_since),
            restarts=self.restarts,
            asleep=phase is Phase.ASLEEP,
        )

    def stop(self, timeout: float = 60) -> bool:
        """Stop accepting, let the child store everything held, spooled and queued, wait for it to exit."""
        with self._lock:  # after this, no restart begins (_begin_restart looks under the lock)
            self.accepting = False
        try:
            while self.phase is Phase.RESTARTING:  # a restart under way finishes first
                time.sleep(0.05)
            return self._stop(timeout)
        finally:
            with self._lock:
                self._phase.move("stopped")
            if self._publisher is not None:
                self._publisher.publish()
                self._publisher.close()
                self._publisher = None

    def _stop(self, timeout: float) -> bool:
        proc = self._proc
        if proc is None:
            return True
        if self.phase is Phase.ASLEEP:
            if not self._handover.pending():  # nothing came since it stopped
                proc.join(RETIRE_WAIT)
                proc.close()
                self._poll()
                return self._heard.child.queued == 0
            with self._lock:
                self._phase.move("restarting")
            self._restart(None, wake=True)  # a child to store what came since
            proc = self._proc
        assert proc is not None and self._queue is not None  # made with the process
        leave_idle_class(proc.pid)  # draining is all that is left: a busy machine must not starve it
        self._flush(pause=True)
        if proc.is_alive():
            self._queue.put(Stop())
        deadline = time.monotonic() + timeout
        while proc.is_alive() and time.monotonic() < deadline:
            proc.join(0.1)
            self._poll()
        if not proc.is_alive():
            proc.close()  # its pipes are done with: its last counters are read
        self._poll()
        if len(self._handover.held):  # the child had died and no new one could start
            with self._lock:
                self._lost += self._handover.keep_leftovers(self.db_path)
            return False
        if proc.is_alive():  # it ignores SIGTERM; what it has not stored is safe in its spool
            log.error(
                "capture writer did not finish storing within %.0fs: stopped it; %d calls stay in its "
                "spool and are stored when a writer next opens %s",
                timeout,
                self.stats().queued,
                self.db_path,
            )
            proc.kill()
            proc.join(5)
            proc.close()
            return False
        return self._heard.child.queued == 0  # else the store was unavailable: they wait in the spool

    def _poll(self) -> None:
        """Take the child's latest counters and forget the calls it has safely spooled."""
        if self.phase is not Phase.RESTARTING:
            with self._lock:
                self._heard.take(self._replies)

    def delete_session(self, session: str, timeout: float = 30.0) -> dict:
        """Ask the child to delete a session (its writer thread does it between batches) and wait."""
        with self._lock:
            self._deleting += 1
        try:
            self.expect()  # if asleep, the child that does the deletion starts now
            deadline = time.monotonic() + timeout
            while self.phase is Phase.RESTARTING and self.accepting and time.monotonic() < deadline:
                time.sleep(0.02)
            proc, inbox = self._proc, self._queue
            if (
                not self.accepting
                or self.phase is Phase.RESTARTING
                or proc is None
                or inbox is None
                or (not proc.is_alive())
            ):
                raise WriterUnavailable("the capture writer is not running")
            return self._heard.ask_deletion(proc, inbox, session, deadline, self._poll, self._lock)
        finally:
            with self._lock:
                self._deleting -= 1
