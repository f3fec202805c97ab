"""What the writer child said, as the daemon keeps it: its counters (added up over the lives of
every child), its acknowledgements (into the in-flight ledger) and its answers to deletions.

The replies are read off the pipe by a thread (:mod:`launch`); the supervisor takes them from
that queue under its lock, each time it hands over or is asked for its counters.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable

from ctxscope.inspector.base.clock import now_iso
from ctxscope.inspector.writer.daemon_side.in_flight import InFlight
from ctxscope.inspector.writer.daemon_side.launch import ChildProcess, Outbox
from ctxscope.inspector.writer.daemon_side.restart import add_lives
from ctxscope.inspector.writer.protocol import WriterUnavailable
from ctxscope.inspector.writer.status import WriterStats
from ctxscope.inspector.writer.wire.messages import Counters, Deleted, DeleteSession, FromChild, Taken


class ChildReplies:
    """The counters of the running child and of those before it, and the deletions' answers."""

    def __init__(self, ledger: InFlight, on_stored: Callable[[], None]):
        self.ledger = ledger
        self.on_stored = on_stored  # newly stored calls were counted
        self.child = WriterStats()  # the running child's last counters
        self.base = WriterStats()  # what children that died had done
        self._answers: dict[int, Deleted] = {}  # answers to deletions, until their caller takes them
        self._requests = itertools.count(1)

    def take(self, replies: queue.Queue[FromChild] | None) -> None:
        """Everything the child said since the last call (none if it has no queue yet)."""
        while replies is not None:
            try:
                reply = replies.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if isinstance(reply, Counters):
                stored = reply.stats.get("written", 0) > self.child.written
                self.child = WriterStats(**reply.stats)
                if stored:
                    self.on_stored()
                self.ledger.counted(reply.received)
            elif isinstance(reply, Taken):
                self.ledger.acknowledged(reply.received)
            elif isinstance(reply, Deleted):
                self._answers[reply.request] = reply

    def child_failed(self, why: str) -> None:
        """A child died or would not start: ``why`` stays the last error once a new child runs."""
        self.base = dataclasses.replace(self.base, last_error=why)

    def child_starting(self, store_error: str | None) -> None:
        """A new child said it is ready; until its first counters, its store's state is what it said."""
        if store_error is not None:
            self.child = WriterStats(running=True, store_failures=1, last_error=store_error, store_down_since=now_iso())

    def retire_child(self) -> None:
        """The running child is gone: its counters join the ones before it. Its death, counted in
        ``base`` already, is newer than any error it reported."""
        self.base = dataclasses.replace(
            add_lives(self.base, self.child), last_error=self.base.last_error or self.child.last_error
        )
        self.child = WriterStats()

    def lives(self) -> WriterStats:
        return add_lives(self.base, self.child)

    def ask_deletion(
        self,
        proc: ChildProcess,
        inbox: Outbox,
        session: str,
        deadline: float,
        poll: Callable[[], None],
        lock: threading.Lock,
    ) -> dict:
        """Send a deletion and wait for its answer (``poll`` takes the replies meanwhile)."""
        request = next(self._requests)
        inbox.put(DeleteSession(request, session, max(0.1, deadline - time.monotonic() - 1.0)))  # answered first
        while True:
            poll()
            with lock:
                answer = self._answers.pop(request, None)
            if answer is not None:
                if answer.result is None:
                    raise WriterUnavailable(answer.error or "the deletion failed")
                return answer.result
            if not proc.is_alive() or time.monotonic() > deadline:
                raise WriterUnavailable(
                    "the capture writer did not answer the deletion"
                    + ("" if proc.is_alive() else f": it exited with code {proc.exitcode}")
                )
            time.sleep(0.02)
