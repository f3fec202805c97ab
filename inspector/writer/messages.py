"""What the writer process and its child say to each other over their two queues, as typed messages.

Parent to child (the inbox): ``Handover`` (a batch of packed calls, and whether the traffic paused),
``DeleteSession`` and ``Stop``. Child to parent (the replies): ``Ready`` or ``Failed`` once at
start, ``Recovered`` right after, then ``Counters`` whenever they change and ``Deleted`` for each
``DeleteSession``. All are frozen dataclasses, pickled by the multiprocessing queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.writer.spool_format import call_size, encode


@dataclass(frozen=True)
class Handover:
    """Calls the proxy held (each packed by ``spool_format.pack``); ``pause``: the traffic paused.

    It crosses the pipe already in the spool's record format (``record``, with each call's body
    bytes in ``sizes``): the proxy's queue thread encodes the batch once, where it would have pickled
    it, and the child appends those bytes to its spool as they are, with no unpickling of the calls
    nor encoding them again (docs/architecture.md, "Messages between the writer and its child")."""

    pause: bool
    batch: list[tuple] | None  # None once it has crossed: the calls are in ``record``
    dropped: int = 0  # calls the proxy dropped since the last hand-over (its queue was full): recorded by the child
    record: bytes | None = None
    sizes: tuple[int, ...] = ()

    def __reduce__(self):
        if not self.batch:  # crossed already, or only drops to tell
            return Handover, (self.pause, None, self.dropped, self.record, self.sizes)
        return Handover, (self.pause, None, self.dropped, b"".join(encode(self.batch)),
                          tuple(call_size(fields) for fields in self.batch))

    @property
    def calls(self) -> int:
        return len(self.batch) if self.batch is not None else len(self.sizes)


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
