"""A call's prompt shape: what the advisor's replays read of a prompt, without its text.

Per segment its pointer, kind, hash, tokens, cache marker and name (a tool's name as the advice
sorts tools by); per prompt the API, model, caching policy and the parameters that key a cache
entry. The writer takes a call's shape beside its findings facts, as a delta from its thread's
previous call (the segments they share are not repeated), so a session's shapes cost about its
new content to store and to read; ``rebuild`` turns them back into ``SessionCall``s whose prompts
share their segments and have empty texts (docs/architecture.md, "The cache advisor"). Pure.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from ctxscope.inspector.advisor.model import SessionCall, kind_codes
from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.cache.memory import MESSAGE_INVALIDATORS
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment
from ctxscope.inspector.analyses.hashes import Hashes
from ctxscope.inspector.analyses.tool_refs import ToolRefs

SHAPE_VERSION = 1
BILLING_HEADER = "x-anthropic-billing-header"  # such a segment is flagged (body_whatif.py rewrites it)
_PARAMS = (*MESSAGE_INVALIDATORS, "conversation")  # what prefix_keys and server_state read of params
_NO_REFS = ToolRefs({}, {})


def _tool_name(seg: Segment) -> str | None:
    """A tool definition's name as ``rewrite.tool_name`` reads it from the body (no ``type`` fallback)."""
    try:
        tool = json.loads(seg.text)
    except ValueError:
        return None
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    return str(tool.get("name") or (fn.get("name") if isinstance(fn, dict) else "") or "")


def _same(a: Segment, b: Segment) -> bool:
    return a.hash == b.hash and a.pointer == b.pointer and a.breakpoint == b.breakpoint and a.kind == b.kind


def _row(seg: Segment) -> list:
    billing = seg.text.lstrip().lower().startswith(BILLING_HEADER) if seg.kind == "system" else False
    name = _tool_name(seg) if seg.kind == "tools" else None
    return [seg.pointer, seg.kind, seg.hash, seg.breakpoint, name, int(billing)]


def shape_json(call: SessionCall, prev: SessionCall | None) -> str:
    """The shape of ``call``'s prompt as a delta from ``prev``'s (its thread's previous call): the
    ranges of segments it has at the same places as ``prev`` (copied), and the others in full. A
    span that changes early, a marker that moves, messages appended: each costs its own segments."""
    segs, tokens = call.prompt.segments, call.tokens.per_segment
    copy: list[list[int]] = []
    if prev is not None:
        before = prev.prompt.segments
        start = None
        for i in range(min(len(before), len(segs))):
            if _same(before[i], segs[i]):
                if start is None:
                    start = i
            elif start is not None:
                copy.append([start, i])
                start = None
        if start is not None:
            copy.append([start, min(len(before), len(segs))])
    fresh = _uncovered(copy, len(segs))
    policy = {k: v for k, v in call.prompt.cache_policy.items() if k != "breakpoints"}
    data: dict[str, Any] = {
        "v": SHAPE_VERSION,
        "base": prev.id if prev is not None and copy else None,
        "n": len(segs),
        "copy": copy,
        "segs": [_row(segs[i]) for i in fresh],
        "tokens": [tokens[i] for i in fresh],
        "api": call.prompt.api,
        "model": call.prompt.model,
        "policy": policy,
        "params": {k: call.prompt.params[k] for k in _PARAMS if k in call.prompt.params},
        "prev_response": call.prompt.previous_response_id,
    }
    return json.dumps(data, separators=(",", ":"), default=str)


def _uncovered(copy: Sequence[Sequence[int]], n: int) -> list[int]:
    """The indices below ``n`` outside the ``copy`` ranges."""
    out: list[int] = []
    at = 0
    for start, stop in copy:
        out.extend(range(at, start))
        at = stop
    out.extend(range(at, n))
    return out


class ShapeMissing(LookupError):
    """A call's shape is not stored (or not readable): the session is read from its bodies."""


def is_billing(seg: Segment) -> bool:
    """Whether a shaped segment's text starts with Claude Code's billing header (a shaped segment
    has no text and no role: its role says this)."""
    return seg.role == "billing"


_Built = tuple[
    list[Segment], Hashes, array, list[dict], str, array
]  # segments, hashes, tokens, breakpoints, kinds, cumulative


class _Assembly:
    """One call's prompt put together from its shape: ranges of its base's, the rest given in full."""

    def __init__(self, data: dict) -> None:
        self.rows = iter(data["segs"])
        self.tokens = iter(data["tokens"])
        self.segments: list[Segment] = []
        self.per = array("q")
        self.cum = array("q")  # running sums of ``per``: copied from the base's where a range is, not summed again
        self.parts: list[tuple[Hashes, int, int]] = []
        self.marks: list[dict] = []
        self.kinds: list[str] = []

    def fill(self, stop: int) -> None:
        """The segments from here to ``stop``, given in full."""
        at = len(self.segments)
        fresh = []
        for pointer, kind, digest, marker, name, billing in itertools.islice(self.rows, stop - at):
            # a tool's name is ``rewrite.tool_name``'s, the order the what-if sorts tools in
            fresh.append(Segment(pointer, kind, "billing" if billing else None, "", digest, marker, name))
        self.marks.extend(breakpoints(fresh, at))
        self.segments.extend(fresh)
        tokens = array("q", itertools.islice(self.tokens, stop - at))
        self.per.extend(tokens)
        running = itertools.accumulate(tokens, initial=self.cum[-1] if self.cum else 0)
        self.cum.extend(itertools.islice(running, 1, None))
        self.kinds.append(kind_codes(fresh))
        if fresh:
            self.parts.append((Hashes(s.hash for s in fresh), 0, len(fresh)))

    def copy(self, base: _Built, start: int, stop: int) -> None:
        """The base's segments ``start:stop``, at the same places."""
        if len(self.segments) != start or stop > len(base[0]):
            raise ValueError("a range out of place")
        self.segments.extend(base[0][start:stop])
        self.per.extend(base[2][start:stop])
        cum = base[5][start:stop]
        shift = (self.cum[-1] if self.cum else 0) - (base[5][start - 1] if start else 0)
        self.cum.extend(cum if shift == 0 else array("q", (x + shift for x in cum)))
        self.parts.append((base[1], start, stop))
        self.marks.extend(b for b in base[3] if start <= b["segment"] < stop)
        self.kinds.append(base[4][start:stop])


def _assembled(data: dict, built: dict[str, _Built]) -> _Assembly:
    copy = data["copy"]
    base = built[data["base"]] if copy else None
    made = _Assembly(data)
    for start, stop in copy:
        made.fill(start)
        assert base is not None
        made.copy(base, start, stop)
    made.fill(int(data["n"]))
    if len(made.per) != len(made.segments) or len(made.segments) != int(data["n"]):
        raise ValueError("a shape that does not add up")
    return made


def rebuild(rows: Sequence[dict], shapes: Mapping[str, str]) -> list[SessionCall]:
    """The calls of ``rows`` (the store's columns, started_at as unix seconds, ``usage`` and ``cache``
    decoded) with prompts rebuilt from their ``shapes``; calls without a readable prompt are left
    out, as ``model.build_session`` leaves them. ShapeMissing when a call's shape is not stored."""
    built: dict[str, _Built] = {}
    out: list[SessionCall] = []
    for row in rows:
        text = shapes.get(row["id"])
        if text is None:
            raise ShapeMissing(row["id"])
        try:
            data = json.loads(text)
        except ValueError:
            raise ShapeMissing(row["id"]) from None
        if not isinstance(data, dict) or data.get("v") != SHAPE_VERSION:
            raise ShapeMissing(row["id"])
        if data.get("skip"):
            continue
        try:
            made = _assembled(data, built)
        except (ValueError, KeyError, TypeError, LookupError):  # damaged, or its base is not there
            raise ShapeMissing(row["id"]) from None
        segments, per, marks = made.segments, made.per, made.marks
        joined = Hashes.join(made.parts) if made.parts else Hashes()
        codes = "".join(made.kinds)
        built[row["id"]] = (segments, joined, per, marks, codes, made.cum)
        policy = {"breakpoints": marks, **data["policy"]}
        prompt = CanonicalPrompt(
            data["api"],
            data["model"],
            segments,
            policy,
            data["params"],
            data["prev_response"],
            hashes=joined,
            tool_refs=_NO_REFS,
        )
        tokens = TokenBreakdown(made.cum[-1] if made.cum else 0, {}, per, cumulative=made.cum)
        stored = row.get("cache")
        cache: dict = stored if isinstance(stored, dict) else {}
        out.append(
            SessionCall(
                id=row["id"],
                seq=row["seq"],
                started_at=float(row["started_at"]),
                api=row["api"],
                model=prompt.model or row.get("model"),
                thread=row.get("thread"),
                scope=row.get("key_fingerprint") or "",
                usage=row.get("usage"),
                response=None,
                prompt=prompt,
                tokens=tokens,
                compacted=bool(row.get("has_compaction_before")),
                provider=row.get("provider"),
                lost_tokens=cache.get("lost_tokens"),
                lost_usd=cache.get("lost_cost_usd"),
                verdict=cache.get("verdict"),
                cache=stored if isinstance(stored, dict) else None,
                kinds=codes,
            )
        )
    return out


def textless(call: SessionCall, prev: SessionCall | None) -> SessionCall:
    """A call parsed from a body as ``rebuild`` would make it from its shape: no body, no text (a
    tool's name and a billing header said by ``name`` and ``role``), the segments it has at the same
    places as ``prev`` (its thread's previous textless call) shared with it. What a what-if made
    from the bodies one at a time keeps of each call."""
    before = prev.prompt.segments if prev is not None else ()
    segments: list[Segment] = []
    for i, seg in enumerate(call.prompt.segments):
        if i < len(before) and _same(before[i], seg):
            segments.append(before[i])
            continue
        pointer, kind, digest, marker, name, billing = _row(seg)
        segments.append(Segment(pointer, kind, "billing" if billing else None, "", digest, marker, name))
    prompt = dataclasses.replace(call.prompt, segments=segments, tool_refs=_NO_REFS)
    return dataclasses.replace(call, prompt=prompt, body=None, response=None, kinds=kind_codes(segments))


def breakpoints(segments: Sequence[Segment], start: int = 0) -> list[dict]:
    """``cache_policy["breakpoints"]`` as ``canonicalize`` lists them, of ``segments`` placed from ``start``."""
    return [
        {"segment": start + i, "pointer": s.pointer, "ttl": (s.breakpoint or {}).get("ttl")}
        for i, s in enumerate(segments)
        if s.breakpoint is not None
    ]


SKIPPED = json.dumps({"v": SHAPE_VERSION, "skip": True})  # a call without a prompt the advisor reads
