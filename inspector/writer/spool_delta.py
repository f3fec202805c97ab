"""A large request body goes into the spool as the new bytes it adds to one spooled before it
(docs/architecture.md, "A spool of new bytes").

An agent's requests repeat the conversation so far, so consecutive request bodies share almost
all their bytes. Written whole, 1 MB requests cost the child more than anything else it did on
them (the copy into the page cache was ~40% of its CPU) and filled the spool's limit in as many
calls as it holds megabytes. A body that shares at least DELTA_MIN leading bytes with one of the
last REMEMBERED large request bodies of this spool is written as the pieces of the file that hold
that prefix, then its own new bytes (``spool_format``). The bodies are remembered as views of the
hand-overs they came in, until the spool is emptied.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from ctxscope.inspector.body_reuse import match_forward
from ctxscope.inspector.writer.spool_format import (
    BODY_FIELDS,
    MAX_PIECES,
    RECORD_HEAD,
    REQUEST_BODY,
    bodies_start,
    heads_of,
    payload_parts,
)

DELTA_MIN = 16 << 10  # a shorter shared prefix is written again (and smaller bodies are not compared)
REMEMBERED = 4  # large request bodies compared with each new one (several agents may interleave)

Pieces = tuple[tuple[int, int], ...]  # (offset in the file, length)
_NONE: Pieces = ()


@dataclass(frozen=True)
class _Spooled:
    """A request body in the spool: its ``length`` bytes at ``at`` of the hand-over it came in,
    and the pieces of the file that hold them."""

    payload: bytes | bytearray
    at: int
    length: int
    pieces: Pieces


@dataclass(frozen=True)
class Plan:
    """What to write for one hand-over: its record's payload, and the bodies to remember once written."""

    pieces: list
    remember: list[_Spooled]


class RecentBodies:
    """The last REMEMBERED large request bodies of one spool file."""

    def __init__(self) -> None:
        self._recent: collections.deque[_Spooled] = collections.deque(maxlen=REMEMBERED)

    def clear(self) -> None:
        """The spool was emptied: nothing in it can be referred to any more."""
        self._recent.clear()

    def plan(self, payload: bytes | bytearray, record_at: int) -> Plan:
        """The payload to write in a record at ``record_at`` for a hand-over's payload (as the
        proxy encoded it): as it came, unless a large request body in it shares enough with a
        remembered one."""
        if len(payload) < DELTA_MIN or len(payload) - bodies_start(payload) < DELTA_MIN:
            return Plan([payload], [])  # no body can be large: its field lists are not even parsed
        heads, at = heads_of(payload)
        bodies_at = at  # where the bodies begin in the payload as it came
        view = memoryview(payload)
        own: list[memoryview] = []  # each body's bytes written in this record, in order
        large = []  # (index in own, where the body starts in payload, its length, pieces holding its prefix)
        for head in heads:
            for i in BODY_FIELDS:
                length = head[i]
                shared, pieces = 0, _NONE
                if i == REQUEST_BODY and length >= DELTA_MIN:
                    shared, pieces = self._shared_prefix(payload, at, length)
                    if pieces:
                        head[i] = [length - shared, *(v for piece in pieces for v in piece)]
                    large.append((len(own), at, length, pieces))
                own.append(view[at + shared:at + length])
                at += length
        if any(pieces for *_, pieces in large):
            out = payload_parts(heads, own)
            bodies_at = len(out[0]) + len(out[1])
        else:
            out = [payload]
        offset = record_at + RECORD_HEAD + bodies_at  # where each body's own bytes go in the file
        starts = []
        for part in own:
            starts.append(offset)
            offset += len(part)
        remember = []
        for index, body_at, length, pieces in large:
            tail = ((starts[index], len(own[index])),) if len(own[index]) else ()
            remember.append(_Spooled(payload, body_at, length, (*pieces, *tail)))
        return Plan(out, remember)

    def written(self, plan: Plan) -> None:
        """The plan's record is in the file: its large request bodies may be referred to."""
        self._recent.extend(plan.remember)

    def _shared_prefix(self, payload: bytes | bytearray, at: int, length: int) -> tuple[int, Pieces]:
        """The longest prefix the body at ``at`` shares with a remembered body, and the pieces of
        the file that hold it; (0, ()) when it is shorter than DELTA_MIN or too scattered."""
        best, pieces = 0, _NONE
        for old in self._recent:
            limit = min(old.length, length)
            if limit <= max(best, DELTA_MIN - 1):
                continue
            shared = match_forward(old.payload, old.at, payload, at, limit)  # type: ignore[arg-type]
            if shared > best and shared >= DELTA_MIN:
                cut = _cut(old.pieces, shared)
                if len(cut) < MAX_PIECES:
                    best, pieces = shared, cut
        return best, pieces


def _cut(pieces: Pieces, length: int) -> Pieces:
    """The pieces that hold the first ``length`` bytes of a body made of ``pieces``."""
    out, left = [], length
    for offset, size in pieces:
        if left <= 0:
            break
        out.append((offset, min(size, left)))
        left -= size
    return tuple(out)
