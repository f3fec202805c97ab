"""The calls the proxy submitted that its writer child has not counted yet: the proxy's ledger of
the child's acknowledgements.

A call is *unacknowledged* from ``submit`` until the child says it took the call off the pipe
(``Taken``, or the ``received`` count of its ``Counters``): held by the proxy, in the pipe, or
read but not yet said. It is then *taken* until the child's next counters count it as received;
from then on their ``queued`` covers it. The writer's queue limits count the unacknowledged
calls, and the ``queued`` it reports adds both kinds to the child's own.
"""

from __future__ import annotations

import collections


class InFlight:
    """Unacknowledged and taken calls, oldest first (see the module docstring)."""

    def __init__(self) -> None:
        self.unacked: collections.deque[tuple[int, str]] = collections.deque()  # (bytes, call id)
        self.unacked_bytes = 0
        self.taken_bytes = 0
        self._taken: collections.deque[int] = collections.deque()  # bytes of each taken call
        self.acked = 0  # calls the current child took
        self._counted = 0  # calls the current child received, as its last ``Counters`` said

    def add(self, size: int, call_id: str) -> None:
        self.unacked.append((size, call_id))
        self.unacked_bytes += size

    def acknowledged(self, received: int) -> None:
        """The child has taken ``received`` calls off the pipe in all: those are taken now."""
        while self.acked < received and self.unacked:
            size = self.unacked.popleft()[0]
            self.unacked_bytes -= size
            self.acked += 1
            self._taken.append(size)
            self.taken_bytes += size

    def counted(self, received: int) -> None:
        """The child's counters count ``received`` calls in all: those left the ledger."""
        self.acknowledged(received)
        for _ in range(min(received - self._counted, len(self._taken))):
            self.taken_bytes -= self._taken.popleft()
        self._counted = received

    def sent_to_child(self, held: int) -> list[tuple[int, str]]:
        """Take out the unacknowledged calls that went to the child, when it died: all but the
        ``held`` newest, which the proxy still holds. A new child then starts counting from 0
        (the dead one's spool is its to count)."""
        sent = [self.unacked.popleft() for _ in range(max(0, len(self.unacked) - held))]
        self.unacked_bytes -= sum(size for size, _ in sent)
        self.acked = self._counted = self.taken_bytes = 0
        self._taken.clear()
        return sent

    def forget_newest(self, n: int) -> None:
        """The ``n`` newest calls will not reach a child (kept in a spool, or lost)."""
        for _ in range(n):
            self.unacked_bytes -= self.unacked.pop()[0]

    @property
    def queued(self) -> int:
        return len(self.unacked) + len(self._taken)

    @property
    def queued_bytes(self) -> int:
        return max(0, self.unacked_bytes) + self.taken_bytes
