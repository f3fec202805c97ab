"""How long the proxy holds finished calls before handing them to the writer child.

Handing over per call cost the proxy more than forwarding at a few thousand calls a second, and a
child woken in the middle of back-to-back streams added to their time to first byte. So finished
calls wait in the proxy for a pause in the traffic: they go to the child once no call has finished
for QUIET_GAP, or the oldest has waited MAX_HOLD, or HOLD_CALLS calls or HOLD_BYTES bytes are held.
"""

from __future__ import annotations

QUIET_GAP = 0.05  # no call finished for this long is a pause in the traffic: hand over what was held
MAX_HOLD = 0.5  # seconds a call may be held for a pause before it is handed over anyway
HOLD_CALLS = 2000  # ... or once this many calls are held
HOLD_BYTES = 4 << 20  # ... or this many body bytes (a hand-over must not keep bodies alive for long)


class Held:
    """Calls finished during a burst of traffic, handed to the child in the first pause. Its fields
    are read by its owner and changed only by its methods."""

    def __init__(self, quiet_gap: float, max_hold: float, max_calls: int, max_bytes: int):
        self.quiet_gap, self.max_hold, self.max_calls, self.max_bytes = quiet_gap, max_hold, max_calls, max_bytes
        self.items: list[tuple] = []
        self.bytes = 0
        self.first = self.last = 0.0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: tuple, size: int, now: float) -> None:
        if not self.items:
            self.first = now
        self.items.append(item)
        self.bytes += size
        self.last = now

    def full(self) -> bool:
        return len(self.items) >= self.max_calls or self.bytes >= self.max_bytes

    def wait(self, now: float) -> float:
        """Seconds until a pause could have begun or the oldest call has waited long enough (<= 0: due)."""
        if not self.items or self.full():
            return 0.0
        return min(self.last + self.quiet_gap, self.first + self.max_hold) - now

    def take(self) -> list[tuple]:
        items, self.items, self.bytes = self.items, [], 0
        return items

    def put_back(self, items: list[tuple], size: int) -> None:
        """Calls taken for a hand-over that could not go (the child was gone): first in line again."""
        self.items[:0] = items
        self.bytes += size
