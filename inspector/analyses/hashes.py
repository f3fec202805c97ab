"""A prompt's segment hashes, compact and comparable at memory speed.

Every call of an agent re-sends its history, so every analysis compares a prompt of thousands of
segments with the few recent prompts it continues (inspector/analyses/threads.py, relation.py,
cache/prediction.py). ``Hashes`` keeps the sha256 digests of a prompt's segments back to back in one
``bytes`` object: slicing and concatenating them is one ``memcpy``, comparing them one ``memcmp``,
where a tuple of strings touches one object per segment. It reads as a sequence of hex strings,
like the segments' own ``hash``.

It also knows how far it agrees with the prompts it was built from: ``known`` holds (serial, n)
pairs, "my first n hashes equal those of the Hashes with that serial". incremental.py builds a
prompt from a recent one's segments and says so (``derive``), so ``common_prefix`` of a call and
the calls it grew from starts comparing at the new segments. Serials, not references: older
prompts are not kept alive. Copies and pickles know nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

WIDTH = 32  # bytes of one sha256 digest
DEPTH = 4  # generations of ancestors remembered in ``known``
_SERIALS = itertools.count(1)


class Hashes(Sequence[str]):
    """Segment hashes (sha256 hex) as one ``bytes`` object of digests."""

    __slots__ = ("digests", "known", "serial")

    def __init__(self, hashes: Iterable[str] = (), known: tuple[tuple[int, int], ...] = ()):
        """Raises ValueError unless every hash is a lowercase sha256 hex digest (as hexdigest() writes)."""
        hashes = list(hashes)
        text = "".join(hashes)
        digests = bytes.fromhex(text)
        if not set(map(len, hashes)) <= {2 * WIDTH} or digests.hex() != text:
            raise ValueError("segment hashes must be lowercase sha256 hex digests")
        self._set(digests, known)

    def _set(self, digests: bytes, known: tuple[tuple[int, int], ...]) -> None:
        self.digests = digests
        self.serial = next(_SERIALS)
        self.known = known

    @classmethod
    def from_digests(cls, digests: bytes, known: tuple[tuple[int, int], ...] = ()) -> Hashes:
        if len(digests) % WIDTH:
            raise ValueError("digests must be whole sha256 digests")
        self = cls.__new__(cls)
        self._set(digests, known)
        return self

    @classmethod
    def join(cls, parts: Iterable[tuple[Hashes, int, int]]) -> Hashes:
        """The hashes ``h[start:stop]`` of each (h, start, stop) one after another, in one copy."""
        return cls.from_digests(b"".join(memoryview(h.digests)[i * WIDTH : j * WIDTH] for h, i, j in parts))

    def derive(self, new: Hashes, n: int) -> Hashes:
        """``new`` (a fresh object) knowing that its first ``n`` hashes are these hashes' first ``n``."""
        known = ((self.serial, n),) + tuple((serial, min(k, n)) for serial, k in self.known)
        return Hashes.from_digests(new.digests, known[:DEPTH])

    def __len__(self) -> int:
        return len(self.digests) // WIDTH

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Hashes: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return Hashes.from_digests(self.digests[start * WIDTH : max(start, stop) * WIDTH])
            return Hashes([self[i] for i in range(start, stop, step)])
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("hash index out of range")
        return self.digests[i * WIDTH : (i + 1) * WIDTH].hex()

    def __iter__(self) -> Iterator[str]:
        text, step = self.digests.hex(), 2 * WIDTH
        return (text[i : i + step] for i in range(0, len(text), step))

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and value in set(self)

    def __add__(self, other: Sequence[str]) -> Hashes:
        other = other if isinstance(other, Hashes) else Hashes(other)
        return Hashes.from_digests(self.digests + other.digests)

    def __radd__(self, other: Sequence[str]) -> Hashes:
        return Hashes(other) + self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Hashes):
            return self.digests == other.digests
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.digests)

    def __repr__(self) -> str:
        return f"<Hashes of {len(self)} segments>"

    def __reduce__(self) -> tuple[Callable[[bytes], Hashes], tuple[bytes]]:
        return Hashes.from_digests, (self.digests,)


def known_common(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading hashes ``a`` and ``b`` are known to share without comparing them (0: unknown)."""
    ka, kb = getattr(a, "known", ()), getattr(b, "known", ())
    if not (ka or kb):
        return 0
    sa, sb = getattr(a, "serial", None), getattr(b, "serial", None)
    best = 0
    for serial, n in kb:
        if serial == sa:
            best = max(best, n)
        for other, m in ka:  # siblings: both grew from the same prompt
            if other == serial:
                best = max(best, min(n, m))
    for serial, n in ka:
        if serial == sb:
            best = max(best, n)
    return min(best, len(a), len(b))


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the common prefix of two hash sequences.

    What they are known to share is skipped. Two ``Hashes`` are compared as bytes without copies:
    the whole rest first, then a binary search over halving ranges for the first difference (about
    twice its length compared). Other sequences are compared the same way, slice against slice.
    """
    n = min(len(a), len(b))
    lo = known_common(a, b)
    if isinstance(a, Hashes) and isinstance(b, Hashes):
        da, db = a.digests, memoryview(b.digests)

        def same(i: int, j: int) -> bool:
            return da.startswith(db[i * WIDTH : j * WIDTH], i * WIDTH)

    else:
        a, b = tuple(a), tuple(b)

        def same(i: int, j: int) -> bool:
            return a[i:j] == b[i:j]

    if same(lo, n):
        return n
    hi = n  # a[:lo] == b[:lo]; the first difference lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(lo, mid):
            lo = mid
        else:
            hi = mid
    return lo
