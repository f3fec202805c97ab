"""The what-if sessions of ``causes.py`` made from prompt shapes (``shape.py``) instead of bodies:
the same segments ``canonicalize`` would read from the rewritten body, so the replay gives the
same figures (docs/architecture.md, "The cache advisor"). Where a shape cannot say what the body
rewrite would give (a billing header cut out of a text, a tool that is not an object), NeedsBodies:
the caller reads the session from its bodies. Pure; calls a what-if leaves alone are shared.
"""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from collections.abc import Sequence

from ctxscope.inspector.advisor.model import SessionCall, kind_codes
from ctxscope.inspector.advisor.shape import breakpoints, is_billing
from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.canonical_prompt import Segment
from ctxscope.inspector.analyses.hashes import Hashes


class NeedsBodies(LookupError):
    """This what-if needs the request bodies."""


def shaped(calls: Sequence[SessionCall]) -> bool:
    """Whether the calls were rebuilt from shapes (they carry no body)."""
    return bool(calls) and all(c.body is None for c in calls)


def index_at(call: SessionCall, pointer: str) -> int | None:
    for i, seg in enumerate(call.prompt.segments):
        if seg.pointer == pointer:
            return i
    return None


def _hashes(call: SessionCall, start: int, stop: int, middle: Sequence[Segment]) -> Hashes:
    """The call's hashes with those of segments ``start:stop`` replaced by ``middle``'s (one copy)."""
    old = call.prompt.hashes
    if not isinstance(old, Hashes):
        old = Hashes(old)
    parts = [(old, 0, start), (Hashes(s.hash for s in middle), 0, len(middle)), (old, stop, len(old))]
    return Hashes.join(parts)


def _with_segments(
    call: SessionCall, segments: list[Segment], per: array, hashes: Hashes, start: int, stop: int
) -> SessionCall:
    """The call with ``segments`` (those of ``start:stop`` changed), its breakpoints listed again."""
    prompt = call.prompt
    policy = dict(prompt.cache_policy)
    kept = [b for b in policy.get("breakpoints", ()) if not start <= b["segment"] < stop]
    policy["breakpoints"] = sorted([*kept, *breakpoints(segments[start:stop], start)], key=lambda b: b["segment"])
    new = dataclasses.replace(prompt, segments=segments, cache_policy=policy, hashes=hashes, tool_refs=prompt.tool_refs)
    kinds = call.kinds
    if kinds is not None:
        kinds = kinds[:start] + kind_codes(segments[start:stop]) + kinds[stop:]
    return dataclasses.replace(call, prompt=new, tokens=_tokens(call.tokens, per, start, stop), kinds=kinds)


def _tokens(old: TokenBreakdown, per: array, start: int, stop: int) -> TokenBreakdown:
    """The breakdown with ``per`` (changed in ``start:stop`` only): the running sums before
    ``start`` copied, and after ``stop`` copied too when the changed part sums as before (a held
    span of the same length, tools reordered), else shifted."""
    cum = array("q", old.cumulative)  # an array already (TokenBreakdown makes it one): a copy to slice
    running = cum[start - 1] if start > 0 else 0
    middle = array("q", itertools.accumulate(per[start:stop], initial=running))[1:]
    shift = (middle[-1] if len(middle) else running) - (cum[stop - 1] if stop > 0 else 0)
    tail = cum[stop:] if shift == 0 else array("q", (x + shift for x in cum[stop:]))
    cumulative = cum[:start] + middle + tail
    return TokenBreakdown(old.total + shift, {}, per, cumulative=cumulative)


def first_at(calls: Sequence[SessionCall], pointer: str) -> tuple[Segment, int] | None:
    """The segment at ``pointer`` of the first call that has one, and its tokens."""
    for call in calls:
        i = index_at(call, pointer)
        if i is not None:
            return call.prompt.segments[i], call.tokens.per_segment[i]
    return None


def changed_on(calls: Sequence[SessionCall], pointer: str) -> int:
    """Calls whose segment at ``pointer`` (content or marker) differs from the call before."""
    values = []
    for call in calls:
        i = index_at(call, pointer)
        seg = call.prompt.segments[i] if i is not None else None
        values.append((seg.hash, repr(seg.breakpoint)) if seg is not None else None)
    return sum(1 for a, b in itertools.pairwise(values) if a != b)


def billing_at(calls: Sequence[SessionCall], pointer: str) -> bool:
    for call in calls:
        i = index_at(call, pointer)
        if i is not None and is_billing(call.prompt.segments[i]):
            return True
    return False


def held(calls: Sequence[SessionCall], pointer: str) -> tuple[SessionCall, ...]:
    """Each call with its segment at ``pointer`` held at the first call's (``rewrite.held``: the
    block's own cache marker kept)."""
    first = first_at(calls, pointer)
    if first is None:
        raise NeedsBodies(pointer)
    seg0, tokens0 = first
    out = []
    for call in calls:
        i = index_at(call, pointer)
        if i is None:
            out.append(call)
            continue
        cur = call.prompt.segments[i]
        marker = cur.breakpoint if cur.breakpoint is not None else seg0.breakpoint
        if cur.hash == seg0.hash and marker == cur.breakpoint:
            out.append(call)
            continue
        segments = list(call.prompt.segments)
        segments[i] = Segment(cur.pointer, seg0.kind, seg0.role, "", seg0.hash, marker, seg0.name)
        per = array("q", call.tokens.per_segment)
        per[i] = tokens0
        out.append(_with_segments(call, segments, per, _hashes(call, i, i + 1, segments[i : i + 1]), i, i + 1))
    return tuple(out)


def _tool_run(call: SessionCall) -> list[int]:
    """The indices of the tool definitions: the prompt's leading segments (every parser reads the
    tools first)."""
    segs = call.prompt.segments
    n = 0
    while n < len(segs) and segs[n].pointer.startswith("/tools/"):
        n += 1
    return list(range(n))


def tool_names(call: SessionCall) -> list[str]:
    names = [call.prompt.segments[i].name for i in _tool_run(call)]
    if any(n is None for n in names):
        raise NeedsBodies("/tools")
    return [str(n) for n in names]


def tools_sorted(calls: Sequence[SessionCall]) -> tuple[SessionCall, ...]:
    """Each call with its tools in one order, by name (``rewrite.tools_sorted``)."""
    out = []
    for call in calls:
        segs = call.prompt.segments
        idx = _tool_run(call)
        if not idx:
            out.append(call)
            continue
        tool_names(call)
        tools = [(segs[i], call.tokens.per_segment[i]) for i in idx]
        markers = [s.breakpoint for s, _ in tools if s.breakpoint is not None]
        ordered = sorted(tools, key=lambda t: str(t[0].name))
        new = [Segment(f"/tools/{j}", s.kind, s.role, "", s.hash, None, s.name) for j, (s, _) in enumerate(ordered)]
        if markers:
            new[-1] = dataclasses.replace(new[-1], breakpoint=markers[-1])
        segments = [*segs[: idx[0]], *new, *segs[idx[-1] + 1 :]]
        if all(_same(a, b) for a, b in zip(segments[: len(new) + idx[0]], segs, strict=False)):
            out.append(call)
            continue
        per = array("q", call.tokens.per_segment)
        per[idx[0] : idx[-1] + 1] = array("q", [t for _, t in ordered])
        out.append(_with_segments(call, segments, per, _hashes(call, idx[0], idx[-1] + 1, new), idx[0], idx[-1] + 1))
    return tuple(out)


def _same(a: Segment, b: Segment) -> bool:
    return a.hash == b.hash and a.pointer == b.pointer and a.breakpoint == b.breakpoint


def with_options(calls: Sequence[SessionCall], **options: object) -> tuple[SessionCall, ...]:
    """Each call with ``prompt_cache_options`` fields set (``rewrite.with_options``)."""
    out = []
    for call in calls:
        policy = dict(call.prompt.cache_policy)
        current = policy.get("prompt_cache_options")
        policy["prompt_cache_options"] = {**(current if isinstance(current, dict) else {}), **options}
        out.append(dataclasses.replace(call, prompt=dataclasses.replace(call.prompt, cache_policy=policy)))
    return tuple(out)
