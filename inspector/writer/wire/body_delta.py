"""A large request body crosses the pipe, and lands in the spool, as the new bytes it adds to one
sent before it (docs/architecture.md, "New bytes only").

An agent's requests repeat the conversation so far, so consecutive request bodies share almost
all their bytes. Sent and spooled whole, a 1 MB request cost the proxy a 1 MB write into the pipe,
and the child a 1 MB read, a fresh 1 MB buffer and a copy into the page cache: more than anything
else either did on it. Three parts, one per place a body is:

- ``SentBodies`` (the proxy's feeder): the last REMEMBERED request bodies of DELTA_MIN to
  REMEMBER_MAX bytes it sent down one pipe (at most REMEMBER_BYTES of them, and not a body that a
  later one continues), numbered in the order sent. A new one that shares at least
  DELTA_MIN leading bytes with one of them goes as ``[own, number, shared]`` and its own bytes.
- ``ReceivedBodies`` (the child): the same bodies, numbered the same way, each as the pieces of
  the hand-overs its bytes came in (a rope, joined once it has MAX_ROPE pieces or would keep
  alive more than twice its own length of them). It turns a hand-over into an ``Incoming``: what
  each body is made of, nothing copied.
- ``SpooledBodies`` (one spool file): where in the file each remembered body lies. A body that
  repeats one of them is written as those pieces of the file, then its own bytes; one whose
  predecessor is not in this file (it was emptied since) is written whole, from its rope.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxscope.inspector.base.body_reuse import match_forward
from ctxscope.inspector.writer.wire.call_fields import BODY_FIELDS, REQUEST_BODY
from ctxscope.inspector.writer.wire.spool_format import MAX_PIECES, RECORD_HEAD, heads_of, payload_parts, record_head

DELTA_MIN = 16 << 10  # a shorter shared prefix is sent again (and smaller bodies are not compared)
REMEMBER_MAX = 8 << 20  # a larger body is sent whole and not remembered (a 1M-token context is ~5 MB)
REMEMBERED = 4  # large request bodies compared with each new one (several agents may interleave)
REMEMBER_BYTES = 16 << 20  # ... and the most bytes of them each side keeps (the newest is always kept)
MAX_ROPE = 64  # pieces of earlier hand-overs a remembered body may be made of before it is joined

Pieces = tuple[tuple[int, int], ...]  # (offset in the spool file, length)
Rope = tuple[memoryview, ...]


class SentBodies:
    """The proxy's side: the last REMEMBERED large request bodies sent down one pipe (not those a
    later one continues)."""

    compared = range(DELTA_MIN, REMEMBER_MAX + 1)  # the lengths ``refer`` looks at: the feeder offers no other

    def __init__(self) -> None:
        self._recent: collections.deque[tuple[int, bytes]] = collections.deque()
        self.sent = 0  # large request bodies sent so far: the next one's number

    @property
    def holds(self) -> bool:
        return bool(self._recent)

    def clear(self) -> None:
        """Let go of the bodies (an idle proxy); the child is told with ``Forget``, in order."""
        self._recent.clear()

    def refer(self, body: bytes) -> tuple[int, int] | None:
        """For a request body: ``(number, shared)`` of the remembered body it shares the longest
        prefix with, when that is at least DELTA_MIN bytes, else None. A large body is remembered
        either way."""
        if not DELTA_MIN <= len(body) <= REMEMBER_MAX:
            return None
        best, found = DELTA_MIN - 1, None
        for item in reversed(self._recent):  # the newest first: usually the one it repeats
            old = item[1]
            limit = min(len(old), len(body))
            # a longer shared prefix than ``best`` needs the byte at ``best`` to agree: one byte
            # rules out the bodies that cannot win before any bulk comparison
            if limit <= best or old[best] != body[best]:
                continue
            shared = match_forward(old, 0, body, 0, limit)
            if shared > best:
                best, found = shared, item
        if found is not None and _continues(best, len(found[1])):
            _drop(self._recent, found)
        self._recent.append((self.sent, body))
        _forget_oldest(self._recent, lambda sent: len(sent[1]))
        self.sent += 1
        return None if found is None else (found[0], best)


def _continues(shared: int, base: int) -> bool:
    """A body that repeats all of a ``base``-byte body but (at most) its last DELTA_MIN bytes
    continues it: the next request extends the new one, so the base is forgotten and its room
    goes to other agents' bodies (the same rule on both sides of the pipe)."""
    return shared >= base - DELTA_MIN


def _drop(recent: collections.deque, item: object) -> None:
    """Remove ``item`` itself (``deque.remove`` would compare bodies byte by byte on the way)."""
    for k, other in enumerate(recent):
        if other is item:
            del recent[k]
            return


def _forget_oldest(recent: collections.deque, length: Callable[[Any], int]) -> None:
    """Keep at most REMEMBERED bodies and REMEMBER_BYTES of them, the newest always: the same rule
    on both sides of the pipe, on the same lengths, so they remember the same bodies."""
    total = sum(length(item) for item in recent)
    while len(recent) > REMEMBERED or (len(recent) > 1 and total > REMEMBER_BYTES):
        total -= length(recent.popleft())


@dataclass(frozen=True)
class Large:
    """A large request body of a hand-over: its number, its bytes, and what it repeats."""

    number: int
    rope: Rope
    length: int
    base: int | None  # the number of the body it repeats the first ``shared`` bytes of
    shared: int


@dataclass(frozen=True)
class Incoming:
    """A hand-over's payload as the child received it, with its large request bodies resolved."""

    payload: bytes | bytearray
    heads: list | None  # the calls' field lists; None when no body is large (nothing was parsed)
    own: list[memoryview]  # each body's bytes in the payload, in order
    large: dict[int, Large]  # by index in ``own``

    def plain(self) -> bytes | bytearray:
        """The payload with every body whole, for the paths that decode it (a spool that cannot
        take it): one copy of the repeated bytes, only there."""
        if self.heads is None:
            return self.payload
        heads, bodies = [list(head) for head in self.heads], []
        k = 0
        for head in heads:
            for i in BODY_FIELDS:
                big = self.large.get(k)
                body = b"".join(big.rope) if big is not None else self.own[k]
                head[i] = len(body)
                bodies.append(body)
                k += 1
        return b"".join(payload_parts(heads, bodies))


class ReceivedBodies:
    """The child's side: the large request bodies received, numbered as the proxy numbered them."""

    def __init__(self) -> None:
        self._recent: collections.deque[Large] = collections.deque()
        self.received = 0

    def clear(self) -> None:
        """The proxy let go of its bodies (``Forget``): so do we, and their hand-overs' buffers."""
        self._recent.clear()

    def held(self) -> int:
        """Bytes of hand-overs the remembered bodies keep alive."""
        return _held(tuple(piece for body in self._recent for piece in body.rope))

    def take(self, payload: bytes | bytearray, large: int) -> Incoming:
        """The ``Incoming`` for a hand-over's payload that the proxy says holds ``large`` large
        request bodies. ValueError if the payload refers to what was never sent: the two sides
        of the pipe disagree, which is a defect, not input."""
        if not large:
            return Incoming(payload, None, [], {})
        heads, at = heads_of(payload)
        view = memoryview(payload)
        own: list[memoryview] = []
        found: dict[int, Large] = {}
        for head in heads:
            for i in BODY_FIELDS:
                value = head[i]
                base, shared, n = None, 0, value
                if isinstance(value, list):
                    n, number, shared = value
                    base = self._get(number)
                    if type(shared) is not int or not DELTA_MIN <= shared <= base.length:
                        raise ValueError(f"a body repeats {shared} bytes of one of {base.length}")
                if type(n) is not int or n < 0:
                    raise ValueError("a body's length is not a length")
                part = view[at : at + n]
                if len(part) != n:
                    raise ValueError("a body longer than its hand-over")
                at += n
                own.append(part)
                if i == REQUEST_BODY and DELTA_MIN <= shared + n <= REMEMBER_MAX:
                    rope = (*_cut_rope(base.rope, shared), part) if base is not None else (part,)
                    if len(rope) > MAX_ROPE or _held(rope) > 2 * (shared + n) + DELTA_MIN:
                        rope = (memoryview(b"".join(rope)),)
                    body = Large(self.received, rope, shared + n, None if base is None else base.number, shared)
                    if base is not None and _continues(shared, base.length):
                        _drop(self._recent, base)
                    self._recent.append(body)
                    _forget_oldest(self._recent, lambda large: large.length)
                    self.received += 1
                    found[len(own) - 1] = body
                elif base is not None:
                    raise ValueError("a reference in place of a small or response body")
        if len(found) != large or at != len(payload):
            raise ValueError("a hand-over that does not add up to what the proxy said it holds")
        return Incoming(payload, heads, own, found)

    def _get(self, number: int) -> Large:
        for body in self._recent:
            if body.number == number:
                return body
        raise ValueError(f"a reference to body {number}, which is not remembered")


def _held(rope: Rope) -> int:
    """Bytes of the hand-overs a rope keeps alive: a body that repeats a few KiB of each of many
    large hand-overs must not keep them all (it is joined instead)."""
    return sum({id(p.obj): memoryview(p.obj).nbytes for p in rope}.values())


def _cut_rope(rope: Rope, length: int) -> Rope:
    """The pieces that hold the first ``length`` bytes of ``rope``."""
    out, left = [], length
    for piece in rope:
        if left <= 0:
            break
        out.append(piece[:left])
        left -= len(piece)
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """What to write for one hand-over: its records (each a list of pieces, header first), and
    where its large request bodies will lie."""

    records: list[list]
    remember: list[tuple[int, Pieces]]  # (number, pieces of the file) of each large request body


@dataclass
class _Record:
    """The calls of one record being laid out: their field lists and each body's parts."""

    heads: list = field(default_factory=list)
    parts: list[Rope] = field(default_factory=list)
    large: list[tuple[int, int, Pieces]] = field(default_factory=list)  # (index in parts, number, prefix pieces)


class SpooledBodies:
    """Where one spool file holds the last REMEMBERED large request bodies written to it."""

    def __init__(self) -> None:
        self._where: collections.OrderedDict[int, Pieces] = collections.OrderedDict()

    def clear(self) -> None:
        """The spool was emptied: nothing in it can be referred to any more."""
        self._where.clear()

    def plan(self, incoming: Incoming, record_at: int) -> Plan:
        """The records to write at ``record_at`` for a hand-over: its payload as it came when no
        body is large; else each large body as pieces of the file and its own bytes, or whole.
        A record may only refer to the ones before it, so a call whose body repeats one in the
        record being laid out starts a new record (a burst hands over several 1 MB requests at once)."""
        if incoming.heads is None:
            payload = [incoming.payload]
            return Plan([[record_head(payload), *payload]], [])
        where = dict(self._where)
        plan = Plan([], [])
        record, laid = _Record(), set[int]()  # ``laid``: the numbers of the large bodies in ``record``
        k, at = 0, record_at
        for head in incoming.heads:
            head = list(head)
            bigs = [incoming.large.get(k + j) for j in range(len(BODY_FIELDS))]
            if any(big is not None and big.base in laid for big in bigs):
                at = self._close(record, at, plan, where)
                record, laid = _Record(), set[int]()
            for j, i in enumerate(BODY_FIELDS):
                part, big = incoming.own[k + j], bigs[j]
                if big is None:
                    head[i] = len(part)
                    record.parts.append((part,))
                    continue
                pieces = _cut(where.get(big.base) if big.base is not None else None, big.shared)
                if pieces:
                    head[i] = [len(part), *(v for piece in pieces for v in piece)]
                    record.parts.append((part,))
                else:
                    head[i] = big.length
                    record.parts.append(big.rope)
                record.large.append((len(record.parts) - 1, big.number, pieces))
                laid.add(big.number)
            k += len(BODY_FIELDS)
            record.heads.append(head)
        self._close(record, at, plan, where)
        return plan

    @staticmethod
    def _close(record: _Record, at: int, plan: Plan, where: dict[int, Pieces]) -> int:
        """Add ``record`` to the plan as written at ``at``; the offset after it."""
        payload = payload_parts(record.heads, [piece for parts in record.parts for piece in parts])
        offset = at + RECORD_HEAD + len(payload[0]) + len(payload[1])  # where the bodies' bytes go
        starts = []
        for parts in record.parts:
            size = sum(len(p) for p in parts)
            starts.append((offset, size))
            offset += size
        for index, number, pieces in record.large:
            start, size = starts[index]
            where[number] = (*pieces, *(((start, size),) if size else ()))
            plan.remember.append((number, where[number]))
        plan.records.append([record_head(payload), *payload])
        return offset

    def written(self, plan: Plan) -> None:
        """The plan's records are in the file: their large request bodies may be referred to."""
        for number, pieces in plan.remember:
            self._where[number] = pieces
            while len(self._where) > REMEMBERED:
                self._where.popitem(last=False)


def _cut(pieces: Pieces | None, length: int) -> Pieces:
    """The pieces of the file that hold the first ``length`` bytes of a body made of ``pieces``;
    () when the file does not hold it, or they would be too many."""
    if not pieces:
        return ()
    out, left = [], length
    for offset, size in pieces:
        if left <= 0:
            break
        out.append((offset, min(size, left)))
        left -= size
    return tuple(out) if len(out) < MAX_PIECES and left <= 0 else ()
