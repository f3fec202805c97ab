"""The writer child's loop: read the proxy's messages, spool them, store in a pause, say how far it got.

Its life is a ``ChildState`` (docs/architecture.md, "The writer child's loop"), moved only by the
methods below, each asserting the states it starts from. While WORKING it reads with a timer and
sends its counters every STATS_INTERVAL; once everything is stored and the counters it sent are
final it is QUIET, and waits for a message for ``idle_release`` at most; then it lets go of its
caches (RELEASED: the counters that say so are still to be sent), and once they are sent it is
DORMANT: it waits on its inbox with no timer at all ("A quiet idle daemon"). A child that a burst
left swollen (its resident size over SWOLLEN times its rest once all is stored, the burst's caches
trimmed and its heap given back) waits only SWOLLEN_RELEASE in QUIET: what stays after a trim (the
large bodies kept for "New bytes only", the caches' last entries, a fragmented heap) goes with the
child, which its supervisor then retires ("Memory"). Steady traffic, a call every few seconds, is
never silent that long. A hand-over makes it
WORKING again from any of these. The end of the inbox, a Stop or the parent's death make it
DRAINING: it stores what it received, and is STOPPED.
"""

from __future__ import annotations

import logging
import os
import time
from enum import Enum
from typing import Protocol

from ctxscope.inspector.writer.child.deferred import Deferred
from ctxscope.inspector.writer.priority import Priority
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.inspector.writer.wire.messages import (
    Counters,
    Deleted,
    DeleteSession,
    Forget,
    FromChild,
    HandoverRecord,
    Received,
    Stop,
    Taken,
)
from ctxscope.vocab.heap import release_heap, resident_bytes
from ctxscope.vocab.tokens import encoding

log = logging.getLogger("ctxscope.store")

STATS_INTERVAL = 0.25
RELEASE_WAIT = 30.0  # seconds the idle child waits for its writer to let go of its caches
SWOLLEN = 1.2  # resident size over the child's rest by this factor, all stored: the idle release comes early
SWOLLEN_RELEASE = 10.0  # ... after this much silence, not ``idle_release``
FEED_INTERVAL = 0.01  # while the writer is full: how soon to look again (reading the pipe meanwhile)


class Inbox(Protocol):
    """What the proxy sends (``entry.PipeInbox``); ``get`` raises EOFError once the proxy is gone."""

    def wait(self, timeout: float | None = None) -> bool: ...

    def get(self, timeout: float | None = None) -> Received | None: ...


class Replies(Protocol):
    """What the child says to the proxy (``entry.PipeReplies``); never raises."""

    def put(self, message: FromChild) -> None: ...


class ChildState(Enum):
    WORKING = "working"  # calls may be under way: read with a timer, send counters as they change
    QUIET = "quiet"  # all stored, the counters sent are final: wait idle_release for a message
    RELEASED = "released"  # the caches were let go after an idle spell; the counters saying so are to be sent
    DORMANT = "dormant"  # released and quiet: wait on the inbox with no timer
    DRAINING = "draining"  # the proxy stopped it or is gone: store what was received
    STOPPED = "stopped"


_RUNNING = (ChildState.WORKING, ChildState.QUIET, ChildState.RELEASED, ChildState.DORMANT)


class ChildLoop:
    """One writer child's loop over its inbox, from its first hand-over to its drain."""

    def __init__(
        self,
        inbox: Inbox,
        replies: Replies,
        writer: CaptureWriter,
        deferred: Deferred,
        priority: Priority,
        *,
        quiet_after: float,
        idle_release: float,
    ):
        self.inbox, self.replies, self.writer, self.deferred = inbox, replies, writer, deferred
        self.priority = priority
        self.quiet_after = quiet_after  # silence that means the proxy holds no calls: a pause
        self.idle_release = idle_release  # silence, everything stored, before the caches go
        self._trimmed_at = 0  # calls received when the writer last shrank its caches (none at start)
        self.state = ChildState.WORKING
        self.heap_returned = True  # the heap went back to the system since the last work ("Memory")
        self.rest: int | None = None  # the smallest resident size seen once all was stored, token engine built
        self._sent: Counters | None = None  # the last counters sent
        self._last_stats = 0.0
        self._last_batch = time.monotonic()
        self._parent = os.getppid()

    # -- moves: each asserts the states it starts from ---------------------------------------------

    def _move(self, to: ChildState, *starts: ChildState) -> None:
        assert self.state in starts, f"writer child: {self.state.name} -> {to.name}"
        self.state = to

    def _work_came(self) -> None:
        self._move(ChildState.WORKING, *_RUNNING)
        self.heap_returned = False

    def _idle_spell(self) -> None:
        """QUIET -> RELEASED: idle for idle_release, the writer lets go of its caches; the counters
        sent next hold its count (an idle child sends none after them)."""
        self._move(ChildState.RELEASED, ChildState.QUIET)
        self.writer.release_memory().wait(RELEASE_WAIT)
        self.deferred.settle(empty=True)  # the stored records kept for the next calls' new bytes go too

    def _stirred(self) -> None:
        """Counters not final yet: QUIET -> WORKING, DORMANT -> RELEASED (others stay)."""
        self._move(
            {ChildState.QUIET: ChildState.WORKING, ChildState.DORMANT: ChildState.RELEASED}.get(self.state, self.state),
            *_RUNNING,
        )

    def _went_quiet(self) -> None:
        """Counters final and sent: WORKING -> QUIET, RELEASED -> DORMANT (others stay)."""
        self._move(
            {ChildState.WORKING: ChildState.QUIET, ChildState.RELEASED: ChildState.DORMANT}.get(self.state, self.state),
            *_RUNNING,
        )

    def _drain(self) -> None:
        self._move(ChildState.DRAINING, *_RUNNING)

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Until the proxy stops it or goes; then the caller drains."""
        deferred = self.deferred
        while True:
            quiet = self.state in (ChildState.QUIET, ChildState.DORMANT)
            if quiet and not self.heap_returned:  # everything is stored: what the burst used goes back
                release_heap()
                self.heap_returned = True
            if quiet and not self.inbox.wait(self._quiet_wait()):
                self._idle_spell()  # no timer but this one, once
            fed = deferred.feed() if deferred.storing else True
            try:
                item = self.inbox.get(
                    timeout=FEED_INTERVAL if not fed and not self.writer.store_down else STATS_INTERVAL
                )
            except (EOFError, OSError):
                break  # the proxy was killed (or stops us by closing the pipe): store what we received, then go
            if isinstance(item, Stop):
                break
            if isinstance(item, DeleteSession):
                self.replies.put(self._delete(item))
                continue
            if isinstance(item, Forget):  # the proxy was idle: the buffers of the bodies it sent can go
                deferred.bodies.clear()
                self.heap_returned = False
                continue
            self._step(item)
            if item is None and os.getppid() != self._parent:
                break  # the parent was killed: store what we received, then go
        self._drain()

    def _step(self, item: HandoverRecord | None) -> None:
        """One hand-over (or a timeout): spool it, store if the traffic paused, say how far it got."""
        deferred, now = self.deferred, time.monotonic()
        pause = now - self._last_batch >= self.quiet_after
        if item is not None:
            self._work_came()
            if item.dropped:  # recorded with the writer's next commit
                self.writer.count_dropped(item.dropped, "the proxy's capture queue was full")
            pause = item.pause
            deferred.add_record(item, now)
            self.replies.put(Taken(deferred.received))
            self._last_batch = now
            if not pause and not deferred.due(now):
                deferred.only_spool()  # traffic again (the writer finishes what it has)
        if deferred.pending() and (pause or deferred.due(now)):
            deferred.start_storing()
        self.priority.update(deferred.behind(), deferred.backlog_bytes(), now)
        deferred.settle()
        if now - self._last_stats < STATS_INTERVAL:  # not per hand-over: ``Taken`` acknowledges each
            self._stirred()
            return
        settled = item is None and deferred.settled()  # before the counters: they are then final
        if settled and not self.heap_returned:  # the heap goes back before the counters say all is stored
            if deferred.received != self._trimmed_at:  # calls came: the burst's caches shrink first
                self._trimmed_at = deferred.received
                self.writer.release_memory(full=False).wait(RELEASE_WAIT)
            release_heap()
            self.heap_returned = True
            self._note_rest()
        counters = Counters(deferred.stats(), deferred.received)
        self._last_stats = now
        if counters != self._sent:  # an idle child sends nothing: the parent may not read for hours
            self.replies.put(counters)
            self._sent = counters
            self._stirred()
        elif settled:
            self._went_quiet()
        else:
            self._stirred()

    def _note_rest(self) -> None:
        """All is stored and the heap given back: the child's rest is the least it has been so, with
        the token engine built (the first call builds it; without it the rest would be ~44 MB low)."""
        size = resident_bytes()
        if size is not None and encoding.cache_info().currsize and (self.rest is None or size < self.rest):
            self.rest = size

    def _quiet_wait(self) -> float | None:
        """How long a quiet child waits for a message before it lets go: no timer once DORMANT,
        SWOLLEN_RELEASE while a burst left it over SWOLLEN times its rest, else ``idle_release``."""
        if self.state is ChildState.DORMANT:
            return None
        size = resident_bytes()
        if self.rest is not None and size is not None and size > SWOLLEN * self.rest:
            return min(self.idle_release, SWOLLEN_RELEASE)
        return self.idle_release

    def _delete(self, request: DeleteSession) -> Deleted:
        """A deletion, done by this child's writer thread between two of its batches."""
        try:
            return Deleted(request.request, result=self.writer.delete_session(request.session, request.timeout))
        except Exception as e:
            return Deleted(request.request, error=str(e))

    def stopped(self) -> None:
        self._move(ChildState.STOPPED, ChildState.DRAINING)
