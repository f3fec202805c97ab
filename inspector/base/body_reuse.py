"""A request body parsed and hashed at the cost of its new bytes, by reusing a similar recent body.

An agent re-sends its whole history on every call, so the next body of a thread repeats the last
one byte for byte up to its newest messages. ``json.loads`` and SHA-256 of a 1.8 MB body (370K
tokens of context) cost milliseconds per call although almost nothing changed. So the writer keeps
its recent bodies (``BodyMemory``, bounded in bytes, LRU) with the byte span of every top-level
member and of every item of a top-level array, and the SHA-256 state at every ``CHECKPOINT``
bytes. A new body:

- reuses a remembered body's value for every member, and every array item, whose bytes it repeats
  (a JSON value is decided by its bytes and the one byte after them), found by ``memcmp``: the
  members in the common prefix, the leading items of an array wherever it now starts, then each
  later member or item at its own place;
- parses only the rest, value by value (``raw_decode``), on latin-1 views of its bytes (windows
  from where it reads) where one character is one byte; a span holding non-ASCII bytes is decoded
  again from UTF-8 for its value;
- resumes SHA-256 from the last checkpoint within the common prefix.

The value equals ``json.loads(raw)`` (the items are shared with the earlier body's value: nobody
mutates a parsed body) and the digest equals ``hashlib.sha256(raw)``; anything the fast path does
not handle (not an object, a repeated top-level name, a byte-order mark, malformed JSON) goes to
``json.loads``, which then also raises its own error. The rule is
(docs/architecture.md, "Bodies parsed at the cost of their new bytes"). This module imports
nothing of ours: the store's ``derive`` and the analyses may both use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CHECKPOINT = 64 * 1024  # bytes between two remembered SHA-256 states
_NOT_WS = re.compile(r"[^ \t\n\r]")  # the first byte past JSON whitespace (none: the window's end)
_DECODER = json.JSONDecoder()
_AFTER_VALUE = frozenset(b" \t\n\r,]}")  # a byte that ends a number as it ends anything else


class _Fallback(ValueError):
    """The fast path does not handle this body: ``json.loads`` decides."""


@dataclass
class Member:
    """A top-level member: its name, its value's byte span and, for an array, its items' spans."""

    name: str
    start: int
    end: int
    items: tuple[array, array] | None = None  # (starts, ends) of the array's items, relative to ``start``


@dataclass
class ParsedBody:
    """A body's value with the spans and hash states that let the next body reuse it."""

    raw: bytes
    value: dict
    members: list[Member]
    digest: str
    states: list[Any] = field(default_factory=list)  # SHA-256 state at k * CHECKPOINT bytes, k = 0, 1, ...
    reused: int = 0  # bytes whose value came from the earlier body
    continues: int = 0  # id() of the remembered body this one continues (it serves instead), else 0

    def member(self, name: str) -> Member | None:
        return next((m for m in self.members if m.name == name), None)


MEMO_MIN = CHECKPOINT  # a shorter common prefix is cheaper to find again than to remember
_last: tuple[bytes, bytes, int] | None = None  # the last long answer of ``common_prefix``, with its two bodies


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix (``match_forward`` from the start of both).

    The writer asks it three times of the same two bodies: parsing the new one, finding the items
    the analyses can reuse, and laying out its blob against the same predecessor. The last long
    answer is kept with the two objects it was for (held, so their ids stay theirs) and given again
    when asked of them, by identity."""
    global _last
    last = _last
    if last is not None and last[0] is a and last[1] is b:
        return last[2]
    n = match_forward(a, 0, b, 0, min(len(a), len(b)))
    if n >= MEMO_MIN and type(a) is bytes and type(b) is bytes:  # immutable only; a short answer keeps it
        _last = (a, b, n)
    return n


def forget_last() -> None:
    """Let go of the two bodies the last answer holds (the store does after each call)."""
    global _last
    _last = None


def match_forward(a: bytes, ai: int, b: bytes, bi: int, limit: int) -> int:
    """How many bytes ``a[ai:]`` and ``b[bi:]`` share from the start, at most ``limit``: memcmp of
    zero-copy slices a window at a time, then bisection inside the window that differs (about the
    shared bytes plus two windows compared)."""
    if limit <= 0:
        return 0
    mb = memoryview(b)
    lo = 0
    while lo < limit:
        hi = min(limit, lo + CHECKPOINT)
        if not a.startswith(mb[bi + lo : bi + hi], ai + lo):
            break
        lo = hi
    else:
        return limit
    while hi - lo > 64:  # the first lo bytes agree, the first hi do not
        mid = (lo + hi) // 2
        if a.startswith(mb[bi + lo : bi + mid], ai + lo):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[ai + lo] == b[bi + lo]:
        lo += 1
    return lo


def _digest(raw: bytes, base: ParsedBody | None, shared: int) -> tuple[str, list[Any]]:
    """SHA-256 of ``raw``, resumed from ``base``'s last state within the ``shared`` prefix."""
    known = base.states if base is not None else []
    states = known[: min(shared // CHECKPOINT, len(known) - 1) + 1] if known else [hashlib.sha256()]
    h = states[-1].copy()
    view = memoryview(raw)
    at = (len(states) - 1) * CHECKPOINT
    while at + CHECKPOINT <= len(raw):
        h.update(view[at : at + CHECKPOINT])
        at += CHECKPOINT
        states.append(h.copy())
    h.update(view[at:])
    return h.hexdigest(), states


class _Reader:
    """Parses values of ``raw`` from latin-1 views of it: a window of ``CHECKPOINT`` bytes from the
    first byte it must read, widened to the end of the body only for a value that runs past it."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.cut = 0
        self.text = ""

    def _at(self, i: int) -> int:
        """``i`` in the view (a new window from ``i`` when it is outside)."""
        if not self.cut <= i < self.cut + len(self.text):
            self.cut, self.text = i, self.raw[i : i + CHECKPOINT].decode("latin-1")
        return i - self.cut

    def _partial(self) -> bool:
        return self.cut + len(self.text) < len(self.raw)

    def _widen(self) -> None:
        self.text = self.raw[self.cut :].decode("latin-1")

    def skip(self, i: int) -> int:
        if i >= len(self.raw):
            return i
        k = self._at(i)
        found = _NOT_WS.search(self.text, k)
        if found is None and self._partial():
            self._widen()
            found = _NOT_WS.search(self.text, k)
        end = found.start() if found is not None else len(self.text)
        return end + self.cut

    def char(self, i: int) -> str:
        return self.text[self._at(i)] if i < len(self.raw) else ""

    def value(self, i: int) -> tuple[Any, int]:
        """The JSON value at byte ``i`` and the offset just past it."""
        k = self._at(i)
        try:
            value, end = _DECODER.raw_decode(self.text, k)
            cut_short = end >= len(self.text) and self._partial()  # a number may go on past the window
        except ValueError:
            if not self._partial():
                raise
            cut_short = True
        if cut_short:
            self._widen()
            value, end = _DECODER.raw_decode(self.text, k)
        if not self.text.isascii() and not self.raw[i : end + self.cut].isascii():  # the first is O(1)
            value = _DECODER.decode(self.raw[i : end + self.cut].decode("utf-8", "surrogatepass"))
        return value, end + self.cut

    def expect(self, i: int, chars: str) -> str:
        c = self.char(i)
        if not c or c not in chars:
            raise _Fallback(f"expected one of {chars!r} at {i}")
        return c


def _same(raw: bytes, at: int, old: bytes, a: int, b: int) -> bool:
    """``raw`` at ``at`` repeats ``old[a:b]`` and the byte after it ends a value in both."""
    n = b - a
    return at + n < len(raw) and raw[at + n] in _AFTER_VALUE and raw.startswith(memoryview(old)[a:b], at)


def _leading(raw: bytes, at: int, old: bytes, o_at: int, o_ends: Sequence[int]) -> int:
    """How many leading items of the array at ``old[o_at]`` the array at ``raw[at]`` repeats byte for
    byte (the byte after the last of them ending a value in both). ``memcmp`` without copies: all
    but the last item first (a client re-sends them all, or all but its newest), else a bisection
    comparing only bytes not yet known equal."""
    n, mv = len(o_ends), memoryview(old)

    def same(a: int, b: int) -> bool:  # bytes [a, b) of both arrays
        return raw.startswith(mv[o_at + a : o_at + b], at + a)

    def ends_value(k: int) -> bool:
        return at + o_ends[k - 1] < len(raw) and raw[at + o_ends[k - 1]] in _AFTER_VALUE

    if not n:
        return 0
    if same(0, o_ends[-2] if n > 1 else 0):
        if same(o_ends[-2] if n > 1 else 0, o_ends[-1]) and ends_value(n):
            return n
        return n - 1 if n > 1 and ends_value(n - 1) else 0
    lo, hi = 0, n - 1  # the first lo items are shared, the first hi are not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(o_ends[lo - 1] if lo else 0, o_ends[mid - 1]):
            lo = mid
        else:
            hi = mid
    return lo if lo and ends_value(lo) else 0


def _array(r: _Reader, at: int, old: Member | None, base: ParsedBody | None, shared: int) -> tuple[list, int, tuple]:
    """The array at ``at`` (its ``[``): items, the offset past its ``]``, and the items' spans
    relative to ``at``. Items of ``old`` (the same member of ``base``) are reused where their bytes
    repeat: the leading ones wherever the array now starts, later ones at their own place."""
    raw = r.raw
    items: list = []
    starts, ends = array("q"), array("q")
    old_items = old.items if old is not None and base is not None else None
    o_at, o_starts, o_ends, old_value, base_raw = 0, array("q"), array("q"), [], b""
    i = r.skip(at + 1)
    if old is not None and base is not None and old.items is not None:
        o_at, (o_starts, o_ends) = old.start, old.items
        old_value, base_raw = base.value[old.name], base.raw
        # In place, the common prefix says which items are the same (with the byte after them).
        same_place = o_at == at
        lo = bisect_left(o_ends, shared - at) if same_place else _leading(raw, at, base_raw, o_at, o_ends)
        if lo:
            items, starts, ends = old_value[:lo], o_starts[:lo], o_ends[:lo]
            i = r.skip(at + ends[-1])
            if r.expect(i, ",]") == "]":
                return items, i + 1, (starts, ends)
            i = r.skip(i + 1)
    if not items and r.char(i) == "]":
        return items, i + 1, (starts, ends)
    while True:
        j = len(items)
        if old_items is not None and j < len(o_ends) and _same(raw, i, base_raw, o_at + o_starts[j], o_at + o_ends[j]):
            item, end = old_value[j], i + o_ends[j] - o_starts[j]
        else:
            item, end = r.value(i)
        items.append(item)
        starts.append(i - at)
        ends.append(end - at)
        i = r.skip(end)
        if r.expect(i, ",]") == "]":
            return items, i + 1, (starts, ends)
        i = r.skip(i + 1)


def _parse(raw: bytes, base: ParsedBody | None, shared: int) -> tuple[dict, list[Member], int]:
    r = _Reader(raw)
    value: dict = {}
    members: list[Member] = []
    reused = 0
    old_members, old_value = (base.members, base.value) if base is not None else ([], {})
    # Leading members inside the common prefix (and the byte after them) are the base's, as they are.
    for m in old_members:
        if m.end >= shared:
            break
        value[m.name] = old_value[m.name]
        members.append(m)
        reused += m.end - m.start
    i = r.skip(members[-1].end if members else 1)
    if not members and r.char(i) == "}":
        i += 1
    elif not members or r.expect(i, ",}") == ",":
        if members:
            i = r.skip(i + 1)
        while True:
            r.expect(i, '"')
            name, i = r.value(i)
            i = r.skip(i)
            r.expect(i, ":")
            i = r.skip(i + 1)
            if name in value:
                raise _Fallback(f"{name!r} appears twice")  # json.loads keeps the last: let it
            old = base.member(name) if base is not None else None
            start = i
            if r.char(i) == "[":
                val, i, spans = _array(r, i, old, base, shared)
                members.append(Member(name, start, i, spans))
            elif old is not None and base is not None and _same(raw, i, base.raw, old.start, old.end):
                val, i = old_value[name], i + old.end - old.start
                reused += old.end - old.start
                members.append(Member(name, start, i))
            else:
                val, i = r.value(i)
                members.append(Member(name, start, i))
            value[name] = val
            i = r.skip(i)
            if r.expect(i, ",}") == "}":
                break
            i = r.skip(i + 1)
        i += 1
    else:
        i += 1
    if r.skip(i) != len(raw):
        raise _Fallback("extra data after the object")
    return value, members, reused


def parse(raw: bytes, candidates: Sequence[ParsedBody] = ()) -> tuple[Any, ParsedBody | None]:
    """``json.loads(raw)`` (raising as it does), and the body as the next one can reuse it (None
    when the fast path does not apply). Reuses the candidate sharing the longest byte prefix."""
    if len(raw) < 2 or raw[0] != 0x7B or raw[1] == 0:  # "{", and neither a BOM nor UTF-16/32
        return json.loads(raw), None
    base, shared = None, 0
    for cand in candidates:
        n = common_prefix(cand.raw, raw)
        if n > shared:
            base, shared = cand, n
    try:
        value, members, reused = _parse(raw, base, shared)
    except (ValueError, IndexError, RecursionError):  # json.loads decides, and raises its own error
        return json.loads(raw), None
    digest, states = _digest(raw, base, shared)
    continues = id(base) if base is not None and _continues(base, shared) else 0
    return value, ParsedBody(raw, value, members, digest, states, reused, continues)


class BodyMemory:
    """Recent parsed bodies per key (a session), the candidates for the next body's reuse.

    Bounded by bodies per key, keys and raw bytes (LRU). Losing an entry costs only a full parse.
    """

    def __init__(self, per_key: int = 8, max_keys: int = 64, max_bytes: int = 32 * 2**20):
        self.per_key, self.max_keys, self.max_bytes = per_key, max_keys, max_bytes
        self._entries: OrderedDict[str, list[ParsedBody]] = OrderedDict()
        self.bytes = 0

    def get(self, key: str) -> list[ParsedBody]:
        found = self._entries.get(key)
        if found is None:
            return []
        self._entries.move_to_end(key)
        return found

    def add(self, key: str, body: ParsedBody) -> None:
        """Remember ``body`` as the key's latest; a body it extends is dropped (the new one serves)."""
        entry = self._entries.setdefault(key, [])
        self._entries.move_to_end(key)
        keep = [b for b in entry if id(b) != body.continues]
        self.bytes -= sum(len(b.raw) for b in entry) - sum(len(b.raw) for b in keep)
        keep.insert(0, body)
        self.bytes += len(body.raw)
        while len(keep) > self.per_key:
            self.bytes -= len(keep.pop().raw)
        self._entries[key] = keep
        while self._entries and (len(self._entries) > self.max_keys or self.bytes > self.max_bytes):
            _, old = self._entries.popitem(last=False)
            self.bytes -= sum(len(b.raw) for b in old)

    def shrink(self, max_bytes: int) -> None:
        """Forget the least recent keys' bodies until at most ``max_bytes`` are held."""
        while self._entries and self.bytes > max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= sum(len(b.raw) for b in old)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


def _continues(base: ParsedBody, shared: int) -> bool:
    """A body sharing ``shared`` leading bytes with ``base`` continues it: they differ only from
    the last item of an array on (the newest message, which lost its cache marker, and what came
    after it), so the new body serves the thread from now on."""
    for m in base.members:
        if m.start <= shared < m.end:
            return m.items is not None and len(m.items[0]) > 0 and shared >= m.start + m.items[0][-1]
    return shared >= (base.members[-1].end if base.members else 0)
