"""Where a new body's bytes are already stored: pure byte matching for ``blobs.py``, no database.

A body is a list of *pieces*, each ``(chunk id, offset, length)``: a run of bytes of a stored
chunk. A new body is laid out against a base (an earlier body whose pieces are known) as
segments: runs it shares with the base, found as the common prefix and suffix (memcmp by
bisection) and, for a base of another session or when the ends cover less than half the body,
as long runs found by searching a few sampled anchors of the middle in the base (``bytes.find``,
C speed) and extending each hit both ways; what is left is new and becomes new chunks. Every step
is a C-level comparison or search over the bytes, and the Python work is proportional to the
number of pieces and anchors, never to the body's length
(docs/architecture.md, "Body storage").
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

# The byte matching the writer's body reuse does too; re-exported for blobs.py and legacy.py.
from ctxscope.inspector.base.body_reuse import common_prefix as common_prefix
from ctxscope.inspector.base.body_reuse import match_forward as match_forward

Piece = tuple[int, int, int]  # chunk id, offset in the chunk, length

ANCHOR = 48  # bytes sampled from the new middle and searched for in the base
MIN_MATCH = 256  # a shared run shorter than this is stored again: a piece costs a few bytes, a new chunk a row
SEARCH_FROM = 2048  # a middle shorter than this is taken as new without searching
MAX_ANCHORS = 64  # searches per body, so a big new body costs at most this many passes over the base


@dataclass(frozen=True)
class Segment:
    """``data[start:end]``: from the base at ``base_start`` when ``shared``, else new bytes."""

    start: int
    end: int
    shared: bool
    base_start: int = 0


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix, at most ``limit`` (the same bisection from the end)."""
    return match_backward(a, len(a), b, len(b), min(len(a), len(b), limit))


def match_backward(a: bytes, ai: int, b: bytes, bi: int, limit: int) -> int:
    """How many bytes ``a[:ai]`` and ``b[:bi]`` share at their ends, at most ``limit``."""
    if limit <= 0:
        return 0
    mb = memoryview(b)
    if a.startswith(mb[bi - limit : bi], ai - limit):
        return limit
    lo, hi = 0, limit  # the last lo bytes agree, the last hi do not
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a.startswith(mb[bi - mid : bi - lo], ai - mid):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[ai - lo - 1] == b[bi - lo - 1]:
        lo += 1
    return lo


def find_runs(base: bytes, data: bytes, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """Long runs of ``data[lo:hi]`` that ``base`` holds, as ``(start, end, base_start)`` in order."""
    out: list[tuple[int, int, int]] = []
    if hi - lo < SEARCH_FROM or not base:
        return out
    step = max(ANCHOR * 16, (hi - lo) // MAX_ANCHORS)
    pos = floor = lo
    for _ in range(MAX_ANCHORS * 2):
        if pos + ANCHOR > hi:
            break
        at = base.find(data[pos : pos + ANCHOR])
        if at >= 0:
            back = match_backward(base, at, data, pos, min(at, pos - floor))
            ahead = match_forward(base, at, data, pos, min(len(base) - at, hi - pos))
            if back + ahead >= MIN_MATCH:
                out.append((pos - back, pos + ahead, at - back))
                pos = floor = pos + ahead
                continue
        pos += step
    return out


def plan(base: bytes, data: bytes, *, search: bool = False) -> tuple[int, list[Segment]]:
    """``data`` as segments against ``base``; also the number of new bytes (the smaller, the better
    the base). The middle is searched for runs of the base when ``search`` (a base from another
    session) or when the ends cover less than half the body (an edit near the start)."""
    p = common_prefix(base, data)
    s = common_suffix(base, data, min(len(base), len(data)) - p)
    segments: list[Segment] = []
    if p:
        segments.append(Segment(0, p, True, 0))
    at = p
    # Searching the middle pays when the ends matched little (another session's body, an edit near
    # the start); an append's middle is new bytes, and searching would cost passes over the base.
    wide = search or (len(data) - s - p) * 2 > len(data)
    runs = find_runs(base, data, p, len(data) - s) if wide else []
    for start, end, base_start in runs:
        if start > at:
            segments.append(Segment(at, start, False))
        segments.append(Segment(start, end, True, base_start))
        at = end
    if len(data) - s > at:
        segments.append(Segment(at, len(data) - s, False))
    if s:
        segments.append(Segment(len(data) - s, len(data), True, len(base) - s))
    return sum(g.end - g.start for g in segments if not g.shared), segments


class PieceIndex:
    """A body's pieces with their starting offsets, to cut out the pieces of any byte range."""

    def __init__(self, pieces: Sequence[Piece]):
        self.pieces = pieces
        self.starts = [0, *accumulate(p[2] for p in pieces)]

    def cut(self, start: int, end: int) -> list[Piece]:
        """The pieces covering bytes ``start:end`` of the body, the first and last trimmed."""
        if end <= start:
            return []
        first = bisect_right(self.starts, start) - 1
        last = bisect_right(self.starts, end - 1) - 1
        out = list(self.pieces[first : last + 1])  # whole pieces are copied at C speed
        chunk, offset, length = out[-1]
        out[-1] = (chunk, offset, end - self.starts[last])
        chunk, offset, length = out[0]
        skip = start - self.starts[first]
        out[0] = (chunk, offset + skip, length - skip)
        return out


def append(pieces: list[Piece], more: Sequence[Piece]) -> None:
    """Add pieces, merging one that continues the previous one in the same chunk."""
    for piece in more:
        if pieces:
            chunk, offset, length = pieces[-1]
            if chunk == piece[0] and offset + length == piece[1]:
                pieces[-1] = (chunk, offset, length + piece[2])
                continue
        pieces.append(piece)
