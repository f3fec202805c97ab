"""An immutable sequence kept as a few tuples, so a prompt built from an earlier one shares its segments.

A call's canonical prompt is the previous call's segments plus a few new ones. As one tuple, each
call would copy thousands of segment references (and touch every segment object, cold in memory
by then) only to add three. ``Chunked`` holds tuples of segments instead: a new prompt keeps the
earlier prompt's chunks and appends a chunk of its own. Chunks are merged from the right while a
chunk is no more than twice the size of the one after it, so a prompt has O(log n) chunks and a
segment is copied O(log n) times in all. The first chunk (a prompt's head: tools and system, made
anew by every call) is never merged into the others.

Reads as a tuple: indexing (a bisect over chunk offsets), slicing (sharing whole chunks), ``len``,
iteration, ``+``, equality with tuples; copies and pickles are plain tuples.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any, overload

_MERGE_RATIO = 2


class Chunked(Sequence):
    """An immutable sequence stored as a tuple of tuples."""

    __slots__ = ("_chunks", "_len", "_starts")

    def __init__(self, chunks: Sequence[tuple] = ()):
        chunks = tuple(c for c in chunks if c)
        starts, total = [], 0
        for c in chunks:
            starts.append(total)
            total += len(c)
        self._chunks, self._starts, self._len = chunks, tuple(starts), total

    @classmethod
    def of(cls, *parts: Sequence) -> Chunked:
        """The parts one after another (tuples, Chunked, any sequence): the first part stays a chunk
        of its own, chunks after it are merged from the right as the module says."""
        chunks: list[tuple] = []
        for part in parts:
            chunks.extend(part._chunks if isinstance(part, Chunked) else (tuple(part),))
        chunks = [c for c in chunks if c]
        while len(chunks) > 2 and len(chunks[-2]) <= _MERGE_RATIO * len(chunks[-1]):
            last = chunks.pop()
            chunks[-1] = chunks[-1] + last
        return cls(chunks)

    @property
    def chunks(self) -> tuple[tuple, ...]:
        return self._chunks

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Chunked: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                return Chunked([tuple(self)[index]])
            return self._range(start, max(start, stop))
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError("index out of range")
        k = bisect_right(self._starts, i) - 1
        return self._chunks[k][i - self._starts[k]]

    def _range(self, start: int, stop: int) -> Chunked:
        if start == 0 and stop == self._len:
            return self
        out = []
        for c, s in zip(self._chunks, self._starts, strict=False):
            lo, hi = max(start - s, 0), min(stop - s, len(c))
            if lo < hi:
                out.append(c if (lo, hi) == (0, len(c)) else c[lo:hi])
        return Chunked(out)

    def __iter__(self) -> Iterator:
        return chain.from_iterable(self._chunks)

    def __add__(self, other: Sequence) -> Chunked:
        return Chunked.of(self, other)

    def __radd__(self, other: Sequence) -> Chunked:
        return Chunked.of(other, self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Chunked, tuple)):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Chunked({tuple(self)!r})"

    def __reduce__(self) -> tuple[type[tuple[Any, ...]], tuple[tuple[Any, ...]]]:
        return tuple, (tuple(self),)
