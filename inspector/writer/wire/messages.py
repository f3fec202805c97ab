"""What the writer process and its child say to each other over their two pipes, as typed messages,
and how each is framed on a pipe (docs/architecture.md, "Messages between the writer and its child").

Parent to child (the inbox): ``Handover`` (a batch of packed calls, and whether the traffic paused),
``DeleteSession``, ``Forget`` and ``Stop``. Child to parent (the replies): ``Ready`` or ``Failed``
once at start, ``Recovered`` right after, then ``Taken`` for each hand-over it took off the pipe,
``Counters`` when they change (at most every quarter second while calls flow) and ``Deleted`` for
each ``DeleteSession``. All are frozen dataclasses.

A frame is a kind byte and an 8-byte little-endian length, then the message. Every message but a
hand-over is a JSON object named by its ``type``: nothing read from a pipe is unpickled. A
``Handover`` travels as its counts and the payload of one spool record (``spool_format``): the
JSON list of the calls' fields, then their bodies' raw bytes, written from the proxy's own buffers
with ``writev``; a large request body that repeats one sent before goes as its new bytes
(``body_delta``), and the counts say how many large ones the child must number. The child reads
it as a ``HandoverRecord`` and appends that payload to its spool as it is (but for those new
bytes), never decoding and encoding the calls on the way. ``Taken`` travels as its count alone
(8 bytes): it is sent for every hand-over, and a JSON encoding of the counters each time cost the
child about a third of its work on a 1 MB upload.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.base.json_splice import RepeatedTexts
from ctxscope.inspector.writer.wire.body_delta import SentBodies
from ctxscope.inspector.writer.wire.spool_format import payload_and_size, write_pieces


@dataclass(frozen=True)
class Handover:
    """Calls the proxy held (each packed by ``call_fields.pack``); ``pause``: the traffic paused."""

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
class Forget:
    """The proxy let go of the large request bodies it sent (it was idle): none is referred to again."""


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
class Taken:
    """The calls the child has taken off the pipe so far (spooled, or held): what the proxy may forget."""

    received: int


@dataclass(frozen=True)
class Deleted:
    """The answer to ``DeleteSession``: the deletion's figures, or why it failed."""

    request: int
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class HandoverRecord:
    """A ``Handover`` as the child reads it: its calls as one spool record's payload, unread."""

    pause: bool
    payload: bytearray  # a spool record's payload (spool_format), empty when no call came
    calls: int
    body_bytes: int  # the calls' body bytes, whole
    dropped: int = 0
    large: int = 0  # large request bodies in it, which ``body_delta.ReceivedBodies`` numbers


ToChild = Handover | DeleteSession | Forget | Stop
Received = HandoverRecord | DeleteSession | Forget | Stop  # what the child reads of a ToChild
FromChild = Ready | Failed | Recovered | Counters | Taken | Deleted

_FRAME = struct.Struct("<BQ")  # kind, length of what follows
_JSON, _HANDOVER, _TAKEN = 1, 2, 3
_TAKEN_COUNT = struct.Struct("<Q")
_COUNTS = struct.Struct("<?QIQI")  # a hand-over's pause, dropped, calls, body bytes and large bodies
_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (DeleteSession, Forget, Stop, Ready, Failed, Recovered, Counters, Deleted)
}
MAX_JSON = 64 << 20  # a JSON message longer than this is no message of ours


class Torn(EOFError):
    """The pipe ended inside a message: its writer died while writing it."""


def frame(message: ToChild | FromChild, sent: SentBodies | None = None, headers: RepeatedTexts | None = None) -> list:
    """The bytes of one message on a pipe, as pieces for ``writev`` (bodies are not copied);
    ``sent``: what this pipe's sender remembers of the large request bodies it sent; ``headers``:
    the texts of the header lists it encoded lately."""
    if isinstance(message, Handover):
        before = sent.sent if sent is not None else 0
        pieces, body_bytes = payload_and_size(message.batch, sent, headers) if message.batch else ([], 0)
        large = sent.sent - before if sent is not None else 0
        counts = _COUNTS.pack(message.pause, message.dropped, len(message.batch), body_bytes, large)
        return [_FRAME.pack(_HANDOVER, len(counts) + sum(map(len, pieces))), counts, *pieces]
    if isinstance(message, Taken):
        return [_FRAME.pack(_TAKEN, _TAKEN_COUNT.size), _TAKEN_COUNT.pack(message.received)]
    fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    text = json.dumps({"type": type(message).__name__, **fields}, separators=(",", ":")).encode()
    return [_FRAME.pack(_JSON, len(text)), text]


def send(
    fd: int, message: ToChild | FromChild, sent: SentBodies | None = None, headers: RepeatedTexts | None = None
) -> None:
    """Write one message whole (blocking; OSError, e.g. BrokenPipeError, if the reader is gone)."""
    write_pieces(fd, frame(message, sent, headers))


def receive(fd: int) -> Received | FromChild | None:
    """Read one message (blocking); None at the end of the pipe, ``Torn`` if it ends inside one."""
    first = os.read(fd, _FRAME.size)
    if not first:
        return None
    head = first + _read_exact(fd, _FRAME.size - len(first))
    kind, size = _FRAME.unpack(head)
    if kind == _HANDOVER and size >= _COUNTS.size:
        pause, dropped, calls, body_bytes, large = _COUNTS.unpack(_read_exact(fd, _COUNTS.size))
        return HandoverRecord(pause, _read_exact(fd, size - _COUNTS.size), calls, body_bytes, dropped, large)
    if kind == _TAKEN and size == _TAKEN_COUNT.size:
        return Taken(*_TAKEN_COUNT.unpack(_read_exact(fd, size)))
    if kind != _JSON or size > MAX_JSON:
        raise ValueError(f"not a writer message (kind {kind}, {size} bytes)")
    data = json.loads(_read_exact(fd, size))
    cls = _TYPES.get(data.pop("type", None)) if isinstance(data, dict) else None
    if cls is None:
        raise ValueError("a JSON message of no known type")
    return cls(**data)


def _read_exact(fd: int, n: int) -> bytearray:
    """``n`` bytes from a pipe, read into one buffer (a 1 MB body: one allocation, no joins)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise Torn(f"the pipe ended {got} bytes into a {n}-byte read")
        got += k
    return buf
