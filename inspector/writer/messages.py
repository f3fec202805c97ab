"""What the writer process and its child say to each other over their two queues, as typed messages.

Parent to child (the inbox): ``Handover`` (a batch of packed calls, and whether the traffic paused),
``DeleteSession`` and ``Stop``. Child to parent (the replies): ``Ready`` or ``Failed`` once at
start, ``Recovered`` right after, then ``Counters`` whenever they change and ``Deleted`` for each
``DeleteSession``. All are frozen dataclasses, pickled by the multiprocessing queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Handover:
    """Calls the proxy held (each packed by ``spool_format.pack``); ``pause``: the traffic paused."""

    pause: bool
    batch: list[tuple]
    dropped: int = 0  # calls the proxy dropped since the last hand-over (its queue was full): recorded by the child


@dataclass(frozen=True)
class DeleteSession:
    """Delete a session's calls (and bodies nothing else needs), answered by ``Deleted``."""

    request: int
    session: str
    timeout: float  # seconds the child's writer may take before it answers with an error


@dataclass(frozen=True)
class Stop:
    """Store everything received, then exit."""


@dataclass(frozen=True)
class Ready:
    """The child runs: its capture epoch, and why its store cannot be opened (None when it can)."""

    capture_epoch: int | None
    store_error: str | None


@dataclass(frozen=True)
class Failed:
    """The child could not start (or died, or stayed silent, while it was awaited)."""

    error: str


@dataclass(frozen=True)
class Recovered:
    """The ids of the calls the child took over from spools that dead writers left."""

    ids: list[str]


@dataclass(frozen=True)
class Counters:
    """The child's counters (``WriterStats`` fields plus spool figures) and the calls it has received."""

    stats: dict[str, Any]
    received: int


@dataclass(frozen=True)
class Deleted:
    """The answer to ``DeleteSession``: the deletion's figures, or why it failed."""

    request: int
    result: dict[str, Any] | None = None
    error: str | None = None


ToChild = Handover | DeleteSession | Stop
FromChild = Ready | Failed | Recovered | Counters | Deleted
