"""Churn: why a call's early prefix (tools, system, first message) differs from its thread's previous call's.

A change there costs every later cache read, so each one is a ``Cause`` of a churn finding
(docs/architecture.md, "Findings"): the tools (in another order, or changed) and the rest (system,
first message, or a per-request metadata block) each give their own cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxscope.inspector.advisor.model import SessionCall
from ctxscope.inspector.analyses.hashes import common_prefix
from ctxscope.inspector.analyses.prompt_metadata import block_of

METADATA = "metadata:"  # a cause in a per-request metadata block: "metadata:<block name>"
EARLY_MESSAGES = 1  # messages/input items counted as "early" for churn
EXCERPT = 24


@dataclass(frozen=True)
class Cause:
    """One reason the call's early prefix differs from its predecessor's (a churn finding's unit)."""

    pointer: str
    how: str  # "reordered" (tools in another order), "changed", or METADATA + the block's name
    segment: str  # the segment's kind
    offset: int  # character offset of the first difference
    before: str  # an excerpt of each side around it
    after: str
    lost: int  # tokens from this position on, no longer read from cache


def _early(pointer: str, kind: str) -> bool:
    if kind in ("system", "tools"):
        return True
    parts = pointer.split("/")
    in_messages = len(parts) > 2 and parts[1] in ("messages", "input") and parts[2].isdigit()
    return in_messages and int(parts[2]) < EARLY_MESSAGES


def _changed_bytes(a: str, b: str) -> tuple[int, str, str]:
    """Character offset of the first difference and an excerpt of each side around it."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, n - EXCERPT)
    return n, a[start : n + EXCERPT], b[start : n + EXCERPT]


def causes(prev: SessionCall, cur: SessionCall, shared: int | None = None) -> list[Cause]:
    """Why ``cur``'s early prefix differs from ``prev``'s (``shared``: how many leading segments
    they share, if known): the tools (in another order, or changed) and the rest (system, first
    message) each give their own cause, so a call that reorders its tools and changes its system
    prompt counts under both (docs/architecture.md, "Findings")."""
    if prev.model != cur.model or cur.compacted:  # a compaction rewrites early messages on purpose
        return []
    if cur.prompt.server_state or prev.prompt.server_state:  # the prefix is held server-side
        return []
    a, b = prev.prompt.hashes, cur.prompt.hashes
    if (common_prefix(a, b) if shared is None else shared) >= min(len(a), len(b)):
        return []  # one prompt continues the other
    old_segs, new_segs = prev.prompt.segments, cur.prompt.segments
    n_old, n_new = _tools_end(old_segs), _tools_end(new_segs)
    out = []
    tools_a, tools_b = list(a[:n_old]), list(b[:n_new])
    if tools_a != tools_b:  # the first tool that differs
        k = common_prefix(tools_a, tools_b)
        how = "reordered" if sorted(tools_a) == sorted(tools_b) else "changed"
        out.append(_cause(prev, cur, min(k, len(old_segs) - 1), min(k, len(new_segs) - 1), how, kind="tools"))
    # the rest: the first segment after the tools that differs, if it is early
    rest_a, rest_b = a[n_old:], b[n_new:]
    m = common_prefix(rest_a, rest_b)
    if m < min(len(rest_a), len(rest_b)) and _early(new_segs[n_new + m].pointer, new_segs[n_new + m].kind):
        # a per-request metadata block (inspector/analyses/prompt_metadata.py) is its own cause
        block = block_of(new_segs[n_new + m], cur.api)
        out.append(_cause(prev, cur, n_old + m, n_new + m, METADATA + block.name if block else "changed"))
    return out


def _tools_end(segments: Sequence) -> int:
    """How many leading segments are tool definitions (tools come first in cache order)."""
    n = 0
    for seg in segments:
        if seg.kind != "tools":
            break
        n += 1
    return n


def _cause(prev: SessionCall, cur: SessionCall, j: int, i: int, how: str, kind: str | None = None) -> Cause:
    seg, old = cur.prompt.segments[i], prev.prompt.segments[j]
    offset, before, after = _changed_bytes(old.text, seg.text)
    lost = max(0, min(prev.tokens.total, cur.tokens.total) - cur.tokens.prefix_tokens(i))
    return Cause(seg.pointer, how, kind or seg.kind, offset, before, after, lost)
