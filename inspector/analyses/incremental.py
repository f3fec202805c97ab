"""Canonicalising a body against a similar earlier one, so a call costs about its new messages.

``canonicalize`` of a 100K-token agent prompt walks thousands of blocks and hashes canonical JSON
of each: tens of milliseconds, paid again on every call although one call earlier saw nearly all
of it. An agent re-sends its history byte for byte, and a message's segments depend only on the
message and its position. So a prepared prompt keeps the raw request bytes and where each item of
its ``messages`` (Responses: ``input``) array ends. For a new body we find that array (parsing
the values before it), compare its bytes with a recent body's array (one ``memcmp``): every item
that ends inside the common run parses to the very same value, so its segments are reused as they
are. Only the later items and the head (tools, system, instructions, parameters: few segments) are
canonicalised, and only the later items are scanned for their offsets. The result equals
``canonicalize(api, body)``; tests check it on every kind of change.

Offsets come from the stdlib JSON decoder (``raw_decode``, value by value) on a latin-1 view of
the bytes, where one character is one byte; only the structure matters there, never the text.
"""

from __future__ import annotations

import json
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import Any

from ctxscope.inspector.analyses.accounting import TokenBreakdown, TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment
from ctxscope.inspector.analyses.chunked import Chunked
from ctxscope.inspector.analyses.hashes import Hashes
from ctxscope.inspector.analyses.tool_refs import ToolRefs
from ctxscope.inspector.base.body_reuse import common_prefix
from ctxscope.vocab.apis import Api

ITEMS_KEY: dict[str, str] = {
    Api.ANTHROPIC_MESSAGES: "messages",
    Api.ANTHROPIC_COUNT_TOKENS: "messages",
    Api.OPENAI_CHAT: "messages",
    Api.OPENAI_RESPONSES: "input",
    Api.GEMINI_GENERATE: "contents",
}
View = Callable[[CanonicalPrompt], CanonicalPrompt]
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Prepared:
    """A canonical prompt with what it takes to reuse it for the next body."""

    api: str
    prompt: CanonicalPrompt
    raw: bytes | None = None  # the decoded request body (None: not reusable)
    start: int = 0  # byte offset of the items array's "["
    ends: Sequence[int] = ()  # byte offset just past each item, relative to ``start`` (an int array)
    head: int = 0  # segments before the first item's
    starts: Sequence[int] = ()  # first segment of each item relative to ``head``, plus one past the last
    reused_items: int = 0  # how many leading items came from the base

    @property
    def reusable(self) -> bool:
        return self.raw is not None and bool(self.ends)


class _Malformed(ValueError):
    pass


def _skip(text: str, i: int) -> int:
    blanks = _WS.match(text, i)  # always matches (maybe nothing)
    return blanks.end() if blanks is not None else i


def _ints(values: Sequence[int]) -> array[int]:
    """``values`` as an int array (ours are arrays already: slicing and joining them is a memcpy)."""
    return values if isinstance(values, array) else array("q", values)


def _expect(text: str, i: int, chars: str) -> str:
    c = text[i : i + 1]
    if not c or c not in chars:
        raise _Malformed(f"expected one of {chars!r} at {i}")
    return c


def _value_end(text: str, i: int) -> int:
    return _DECODER.raw_decode(text, i)[1]  # ValueError on malformed JSON


def _member(text: str, i: int) -> tuple[str, int]:
    """A top-level member's name and the offset of its value."""
    name, i = _DECODER.raw_decode(text, i)
    i = _skip(text, i)
    _expect(text, i, ":")
    return name, _skip(text, i + 1)


def _array_start(text: str, key: str) -> int:
    """Offset of the ``[`` of the top-level array ``key``; the values before it are parsed, not it."""
    i = _skip(text, 0)
    _expect(text, i, "{")
    i = _skip(text, i + 1)
    while text[i : i + 1] != "}":
        name, i = _member(text, i)
        if name == key and text[i : i + 1] == "[":
            return i
        i = _skip(text, _value_end(text, i))
        if _expect(text, i, ",}") == ",":
            i = _skip(text, i + 1)
    raise _Malformed(f"no {key} array")


def _items_from(text: str, start: int, i: int, ends: list[int], after_item: bool) -> int:
    """Parse items from offset ``i`` (just past ``[``, or just past an item when ``after_item``) to
    the closing ``]``, appending their ends; returns the offset after the ``]``."""
    i = _skip(text, i)
    if after_item:
        if _expect(text, i, ",]") == "]":
            return i + 1
        i = _skip(text, i + 1)
    elif text[i : i + 1] == "]":
        return i + 1
    while True:
        i = _value_end(text, i)
        ends.append(i - start)
        i = _skip(text, i)
        if _expect(text, i, ",]") == "]":
            return i + 1
        i = _skip(text, i + 1)


def _no_repeat(text: str, i: int, key: str) -> None:
    """The object's members after offset ``i`` must not repeat ``key`` (json.loads keeps the last)."""
    i = _skip(text, i)
    while _expect(text, i, ",}") == ",":
        name, i = _member(text, _skip(text, i + 1))
        if name == key:
            raise _Malformed(f"{key} appears twice")
        i = _skip(text, _value_end(text, i))


def shared_items(raw: bytes, start: int, cand: Prepared) -> int:
    """How many leading items of ``cand``'s array the array at ``raw[start]`` repeats byte for byte.

    Where both arrays start at the same offset (the bytes before them are the same), these are the
    items inside the two bodies' common prefix: ``common_prefix``, which the store asks of the same
    two bodies for parsing and for the blob layout, so a 1 MB history is compared once per call.
    Elsewhere compared without copies (``memcmp``). The last item is looked at first: a client
    usually re-sends all of them, or all but the last (its cache marker moved on), so the bytes
    before it are then compared once; otherwise a binary search over the item ends compares only
    bytes not yet known equal.
    """
    if cand.start == start and cand.raw is not None:
        return bisect_right(cand.ends, common_prefix(cand.raw, raw) - start)
    other, at, ends = memoryview(cand.raw or b""), cand.start, cand.ends

    def same(a: int, b: int) -> bool:  # bytes [a, b) of both arrays
        return raw.startswith(other[at + a : at + b], start + a)

    n = len(ends)
    before_last = ends[-2] if n > 1 else 0
    if not n or not same(0, before_last):
        lo, hi = 0, n - 1 if n else 0  # the first lo items are shared, the first hi are not
    else:
        return n if same(before_last, ends[-1]) else n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(ends[lo - 1] if lo else 0, ends[mid - 1]):
            lo = mid
        else:
            hi = mid
    return lo


def scan_items(
    raw: bytes, key: str, candidates: Sequence[Prepared] = ()
) -> tuple[int, Sequence[int], int, Prepared | None]:
    """(offset of the ``key`` array, its item ends relative to that, items shared with the best
    candidate, that candidate) of a body. Only the items after the shared ones are scanned, and
    only their bytes decoded when a candidate has the same bytes up to the array.
    Raises ValueError when the body is not a JSON object holding one ``key`` array."""
    usable = [c for c in candidates if c.reusable]
    # Same bytes up to and including the "[": the head parses the same, so the array starts there too.
    start = next((c.start for c in usable if raw.startswith(memoryview(c.raw or b"")[: c.start + 1])), None)
    text = None
    if start is None:
        text = raw.decode("latin-1")
        start = _array_start(text, key)
    best, m = None, 0
    for cand in usable:
        # Past the first, a candidate counts only if it shares more than m items: its first m + 1
        # (one comparison, where a pool of many threads would cost a full look at each).
        if m and (
            len(cand.ends) <= m
            or not raw.startswith(memoryview(cand.raw or b"")[cand.start : cand.start + cand.ends[m]], start)
        ):
            continue
        n = shared_items(raw, start, cand)
        if n > m:
            best, m = cand, n
    # Scan on from the last shared item (from the "[" when none), in a text that may begin there.
    resume = start + (best.ends[m - 1] if best is not None else 1)
    cut = 0 if text is not None else resume
    if text is None:
        text = raw[cut:].decode("latin-1")
    new: list[int] = []
    i = _items_from(text, start - cut, resume - cut, new, best is not None)
    _no_repeat(text, i, key)
    ends = _ints(best.ends)[:m] + array("q", new) if best is not None else array("q", new)
    return start, ends, m, best


def item_ends(raw: bytes, key: str) -> tuple[int, ...] | None:
    """Byte offsets (relative to the array's ``[``) just past each item of the top-level array
    ``key``; None when the body is not a JSON object holding one such array."""
    try:
        return tuple(scan_items(raw, key)[1])
    except (ValueError, IndexError):
        return None


def _items(api: str | None, body: Any) -> tuple[str, list] | None:
    key = ITEMS_KEY.get(api or "")
    if key is None:
        return None
    items = body.get(key) if isinstance(body, dict) else None
    return (key, items) if isinstance(items, list) else None


def _layout(segments: Sequence[Segment], key: str, n_items: int) -> tuple[int, Sequence[int]] | None:
    """(head, starts) of a prompt's segments; None when they are not laid out one item after another."""
    prefix = f"/{key}/"
    head = 0
    while head < len(segments) and not segments[head].pointer.startswith(prefix):
        head += 1
    starts, last = [], -1
    for i in range(head, len(segments)):
        pointer = segments[i].pointer
        if not pointer.startswith(prefix):
            return None
        j = int(pointer.split("/", 3)[2])
        if j != last:
            if j != last + 1:
                return None
            starts.append(i - head)
            last = j
    if len(starts) != n_items:
        return None
    starts.append(len(segments) - head)
    return head, array("q", starts)


def _shift(seg: Segment, key: str, by: int) -> Segment:
    _, _, index, *rest = seg.pointer.split("/", 3)
    pointer = f"/{key}/{int(index) + by}" + (f"/{rest[0]}" if rest else "")
    return Segment(pointer, seg.kind, seg.role, seg.text, seg.hash, seg.breakpoint, seg.name, seg.ref, seg.images)


def _reuse(
    api: str | None, body: dict, key: str, items: list, base: Prepared, m: int, view: View | None = None
) -> tuple[CanonicalPrompt, int, array[int]] | None:
    """(prompt, head, starts) of ``body`` with ``base``'s segments for its first ``m`` items."""
    stub = dict(body)
    stub[key] = items[m:]
    part = _canonical(api, stub, view)
    layout = _layout(part.segments, key, len(items) - m) if part is not None else None
    if part is None or layout is None:
        return None
    head, tail_starts = layout
    lo, hi = base.head, base.head + base.starts[m]
    extra = hi - lo  # segments reused
    tail = tuple(_shift(s, key, m) for s in part.segments[head:])
    # The base's chunks are shared, not copied (chunked.py): the head and the tail are the new chunks.
    segments = Chunked.of(part.segments[:head], base.prompt.segments[lo:hi], tail)
    # Breakpoints as canonicalize lists them (segment index, pointer, ttl), without a pass over all segments.
    policy = dict(part.cache_policy)
    policy["breakpoints"] = (
        [bp for bp in part.cache_policy["breakpoints"] if bp["segment"] < head]
        + [
            dict(bp, segment=bp["segment"] - lo + head)
            for bp in base.prompt.cache_policy["breakpoints"]
            if lo <= bp["segment"] < hi
        ]
        + [
            dict(bp, segment=bp["segment"] + extra, pointer=segments[bp["segment"] + extra].pointer)
            for bp in part.cache_policy["breakpoints"]
            if bp["segment"] >= head
        ]
    )
    # Hashes and tool refs from the base's too: the new prompt costs about its new segments.
    base_hashes, part_hashes = base.prompt.hashes, part.hashes
    if isinstance(base_hashes, Hashes) and isinstance(part_hashes, Hashes):
        hashes: Hashes | tuple[str, ...] = Hashes.join(
            [(part_hashes, 0, head), (base_hashes, lo, hi), (part_hashes, head, len(part_hashes))]
        )
    else:
        hashes = (*part_hashes[:head], *base_hashes[lo:hi], *part_hashes[head:])
    if hashes[:head] == base_hashes[:lo]:  # base = this head + the reused segments + what it drops
        refs = ToolRefs.of(tail, base.prompt.tool_refs, base.prompt.segments[hi:])
        if isinstance(hashes, Hashes) and isinstance(base_hashes, Hashes):
            hashes = base_hashes.derive(hashes, hi)  # the first hi are the base's
    else:
        refs = ToolRefs.of(segments)  # what CanonicalPrompt would work out without them
    prompt = CanonicalPrompt(
        part.api,
        part.model,
        segments,
        policy,
        part.params,
        part.previous_response_id,
        hashes=hashes,
        tool_refs=refs,
    )
    return prompt, head, _ints(base.starts)[:m] + array("q", (base.starts[m] + t for t in tail_starts))


def _canonical(api: str | None, body: Any, view: View | None) -> CanonicalPrompt | None:
    prompt = canonicalize(api, body)
    return view(prompt) if view is not None and prompt is not None else prompt


def prepare(
    api: str | None,
    body: Any,
    raw: bytes | None,
    candidates: list[Prepared],
    *,
    min_reuse: int = 0,
    view: View | None = None,
) -> tuple[Prepared | None, Prepared | None]:
    """The prompt of ``body`` and the candidate it reused: the one sharing the most leading items
    byte for byte (None when nothing was reused). The prompt is None when the body does not parse.
    ``min_reuse``: fewer shared bytes are canonicalised again (cheaper than joining to the base).
    ``view``: applied to every prompt canonicalised here (the hashes the call's upstream keys its
    cache on, ``prompt_metadata.cache_view``); it may change the head's hashes, never an item's."""
    found = _items(api, body)
    scanned = None
    if found is not None and raw is not None and len(raw) <= min_reuse:
        # It shares fewer than min_reuse bytes with any candidate, and a later body would share as few
        # with it: nothing to compare, and no item ends to find (it is not reusable).
        prompt = _canonical(api, body, view)
        return (Prepared(prompt.api, prompt, raw) if prompt is not None else None), None
    if found is not None and raw is not None:
        try:
            scanned = scan_items(raw, found[0], [c for c in candidates if c.api == api])
        except (ValueError, IndexError):
            scanned = None
        if scanned is not None and len(scanned[1]) != len(found[1]):
            scanned = None
    if scanned is None or found is None:
        prompt = _canonical(api, body, view)
        return (Prepared(prompt.api, prompt) if prompt is not None else None), None
    key, items = found
    start, ends, m, base = scanned
    if base is not None and ends[m - 1] < min_reuse:
        base = None
    reused = _reuse(api, body, key, items, base, m, view) if base is not None else None
    if reused is not None:
        prompt, head, starts = reused
        return Prepared(prompt.api, prompt, raw, start, ends, head, starts, m), base
    prompt = _canonical(api, body, view)
    if prompt is None:
        return None, None
    layout = _layout(prompt.segments, key, len(items))
    if layout is None:
        return Prepared(prompt.api, prompt), None
    return Prepared(prompt.api, prompt, raw, start, ends, layout[0], layout[1]), None


def prepare_full(api: str | None, body: Any, raw: bytes | None = None, view: View | None = None) -> Prepared | None:
    """``canonicalize`` plus what reuse needs; None when the body does not parse as a prompt."""
    return prepare(api, body, raw, [], view=view)[0]


def count(
    counter: TokenCounter, prepared: Prepared, base: Prepared | None, base_tokens: TokenBreakdown | None
) -> TokenBreakdown:
    """``counter.count_prompt(prepared.prompt)``, reusing ``base_tokens`` for the segments reused from ``base``."""
    m = prepared.reused_items
    if not m or base is None or base_tokens is None or base.prompt is prepared.prompt:
        return counter.count_prompt(prepared.prompt)
    segments = prepared.prompt.segments
    lo, hi = prepared.head, prepared.head + prepared.starts[m]  # the reused range in the new prompt
    by_category = dict(base_tokens.by_category)
    b_lo, b_hi = base.head, base.head + base.starts[m]
    for seg in chain(base.prompt.segments[:b_lo], base.prompt.segments[b_hi:]):  # what the new prompt lacks
        for category, tokens in counter.count_segment(seg).parts:
            by_category[category] -= tokens
    fresh = []
    for seg in chain(segments[:lo], segments[hi:]):
        counted = counter.count_segment(seg)
        fresh.append(counted.total)
        for category, tokens in counted.parts:
            by_category[category] += tokens
    head, tail = array("q", fresh[:lo]), fresh[lo:]
    per_segment = head + _ints(base_tokens.per_segment)[b_lo:b_hi] + array("q", tail)
    if head == base_tokens.per_segment[:b_lo]:  # the same sums up to the end of the reused range
        upto = base_tokens.cumulative[b_hi - 1] if b_hi else 0
        cumulative = _ints(base_tokens.cumulative)[:b_hi] + array("q", accumulate(tail, initial=upto))[1:]
    else:
        cumulative = array("q", accumulate(per_segment))
    return TokenBreakdown(cumulative[-1] if cumulative else 0, by_category, per_segment, cumulative=cumulative)
