"""The prefix relation of a call to its predecessor.

Comparison runs on the segment hashes, compared as bytes (see ``hashes.py``); only
the first differing segment is then opened in both bodies to refine the pointer down to the
first differing JSON value. Parameters outside the prompt are not hashed and so never make a call
DIVERGED; cache markers are not hashed either, and a marker that moved on an unchanged segment is
reported in ``marker_moves``.

Pointers name a location in the *current* call's body and resolve there, with one exception:
when the current prompt lacks content the predecessor had at the end of an array (history shrank,
a tool or block was removed), the pointer names the first missing index, one past the end, as
RFC 6902's "add" paths do; its parent resolves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from ctxscope.inspector.analyses.canonical_prompt import MARKER_KEYS, CanonicalPrompt, escape
from ctxscope.inspector.analyses.hashes import common_prefix
from ctxscope.vocab.kinds import EpochReason, RelationKind

_MISSING = object()


@dataclass(frozen=True)
class CallContext:
    """What classification needs to know about one call."""

    prompt: CanonicalPrompt | None  # None when the body did not parse or has an unknown shape
    provider: str  # route kind, e.g. "anthropic", "openai", "u/<name>"
    api: str | None
    capture_epoch: int = 0  # bumped by the store whenever capture restarts or resumes
    body: Any = None  # the parsed request body, for pointer refinement

    @property
    def model(self) -> str | None:
        return self.prompt.model if self.prompt else None


@dataclass(frozen=True)
class Relation:
    kind: RelationKind
    pointer: str | None = None  # first difference in the current body (DIVERGED; also EPOCH_START)
    epoch_reason: EpochReason | None = None  # set when kind is EPOCH_START
    shared_segments: int = 0  # length of the common segment prefix
    marker_moves: tuple[str, ...] = ()  # pointers of shared segments whose cache marker changed
    detail: str | None = None


def policy_signature(prompt: CanonicalPrompt) -> dict:
    """The caching policy without breakpoint positions (clients move those every call)."""
    policy = prompt.cache_policy
    options = policy.get("prompt_cache_options")
    if isinstance(options, dict):  # the comparison id names the previous response: changes every call
        options = {k: v for k, v in options.items() if k != "comparison_response_id"} or None
    return {
        "top_level": policy.get("cache_control"),
        "uses_breakpoints": bool(policy.get("breakpoints")),
        "ttls": sorted({str(b.get("ttl")) for b in policy.get("breakpoints", ())}),
        "key": policy.get("prompt_cache_key"),
        "retention": policy.get("prompt_cache_retention"),
        "options": options,
    }


def shared_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the common prefix of two hash sequences (see ``hashes.common_prefix``)."""
    return common_prefix(a, b)


def classify(prev: CallContext | None, cur: CallContext, first: EpochReason = EpochReason.SESSION_START) -> Relation:
    """The relation of ``cur`` to its predecessor ``prev`` (None: first call of its thread, which
    starts an epoch for reason ``first``: a new session, or a new thread inside one)."""
    if cur.prompt is None:
        return Relation(RelationKind.NOT_COMPARABLE, detail="request body did not parse as a known prompt shape")
    if cur.prompt.server_state:
        return Relation(RelationKind.NOT_COMPARABLE, detail=f"prefix held server-side ({cur.prompt.server_state})")
    if prev is None:
        return Relation(RelationKind.EPOCH_START, epoch_reason=first)
    if prev.prompt is None:
        return Relation(RelationKind.NOT_COMPARABLE, detail="predecessor did not parse as a known prompt shape")
    reason = _epoch_reason(prev, cur)
    rel = compare(prev.prompt, cur.prompt, prev.body, cur.body)
    if reason is None:
        return rel
    detail = _epoch_detail(reason, prev, cur)
    return Relation(RelationKind.EPOCH_START, rel.pointer, reason, rel.shared_segments, rel.marker_moves, detail)


def _epoch_reason(prev: CallContext, cur: CallContext) -> EpochReason | None:
    assert prev.prompt is not None and cur.prompt is not None  # classify returned earlier without them
    if prev.provider != cur.provider:
        return EpochReason.PROVIDER_CHANGE
    if prev.api != cur.api:
        return EpochReason.API_CHANGE
    if prev.model != cur.model:
        return EpochReason.MODEL_CHANGE
    if prev.capture_epoch != cur.capture_epoch:
        return EpochReason.CAPTURE_RESUMED
    if policy_signature(prev.prompt) != policy_signature(cur.prompt):
        return EpochReason.CACHE_POLICY_CHANGE
    return None


def _epoch_detail(reason: str, prev: CallContext, cur: CallContext) -> str | None:
    if reason == EpochReason.PROVIDER_CHANGE:
        return f"{prev.provider} -> {cur.provider}"
    if reason == EpochReason.API_CHANGE:
        return f"{prev.api} -> {cur.api}"
    if reason == EpochReason.MODEL_CHANGE:
        return f"{prev.model} -> {cur.model}"
    if reason == EpochReason.CACHE_POLICY_CHANGE:
        assert prev.prompt is not None and cur.prompt is not None  # a policy change was seen on both
        a, b = policy_signature(prev.prompt), policy_signature(cur.prompt)
        return "changed: " + ", ".join(k for k in a if a[k] != b[k])
    return None


def compare(prev: CanonicalPrompt, cur: CanonicalPrompt, prev_body: Any = None, cur_body: Any = None) -> Relation:
    """IDENTICAL / RelationKind.APPEND_ONLY / RelationKind.DIVERGED of two canonical prompts (no epoch logic)."""
    k = shared_prefix(prev.hashes, cur.hashes)
    moves = marker_moves(prev, cur, k)
    n_prev, n_cur = len(prev.segments), len(cur.segments)
    if k == n_prev == n_cur:
        return Relation(RelationKind.IDENTICAL, shared_segments=k, marker_moves=moves)
    if k == n_prev:
        return Relation(RelationKind.APPEND_ONLY, shared_segments=k, marker_moves=moves)
    gone = prev.segments[k]
    if k == n_cur:  # the current prompt is a strict prefix: history shrank
        pointer = _missing_position(cur_body, gone.pointer) or gone.pointer
        detail = f"prompt shrank: {n_prev - n_cur} trailing segment(s) gone, first a {gone.kind}"
        return Relation(RelationKind.DIVERGED, pointer, shared_segments=k, marker_moves=moves, detail=detail)
    seg = cur.segments[k]
    pointer = _missing_position(cur_body, gone.pointer) or _refine(prev_body, gone.pointer, cur_body, seg.pointer)
    detail = f"{seg.kind} segment {k} differs" if seg.kind == gone.kind else f"{gone.kind} -> {seg.kind} at segment {k}"
    return Relation(RelationKind.DIVERGED, pointer, shared_segments=k, marker_moves=moves, detail=detail)


def marker_moves(prev: CanonicalPrompt, cur: CanonicalPrompt, k: int) -> tuple[str, ...]:
    """Pointers of the first ``k`` segments whose cache marker differs between the two prompts.

    Only segments carrying a marker in either prompt can differ, and ``cache_policy["breakpoints"]``
    lists exactly those: a look at a few segments instead of a walk over all of them.
    """
    marked = {bp["segment"] for p in (prev, cur) for bp in p.cache_policy.get("breakpoints", ()) if bp["segment"] < k}
    return tuple(
        cur.segments[i].pointer for i in sorted(marked) if prev.segments[i].breakpoint != cur.segments[i].breakpoint
    )


def _parts(pointer: str) -> list[str]:
    return JsonPointer(pointer).parts


def _get(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict):
            doc = doc.get(part, _MISSING)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return _MISSING
        if doc is _MISSING:
            return _MISSING
    return doc


def _missing_position(body: Any, prev_pointer: str) -> str | None:
    """Where ``prev_pointer`` runs off the end of an array in ``body`` (content removed), else None."""
    if body is None:
        return None
    parts, doc = _parts(prev_pointer), body
    for i, part in enumerate(parts):
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        elif isinstance(doc, list) and part.isdigit():
            return "".join("/" + escape(p) for p in parts[:i]) + f"/{len(doc)}"
        else:
            return None
    return None


def _refine(prev_body: Any, prev_pointer: str, cur_body: Any, cur_pointer: str) -> str:
    """The first differing JSON value inside a differing segment, or the segment's own pointer."""
    if prev_body is None or cur_body is None:
        return cur_pointer
    try:
        a, b = _get(prev_body, _parts(prev_pointer)), _get(cur_body, _parts(cur_pointer))
    except JsonPointerException:
        return cur_pointer
    found = _first_diff(a, b, cur_pointer) if type(a) is type(b) and isinstance(a, (dict, list)) else None
    if found is not None:
        return found
    # Same block content: the message around it differs (role, tool_call_id, name ...).
    pp, cp = _parts(prev_pointer), _parts(cur_pointer)
    if len(cp) > 2 and len(pp) > 2:
        ca, cb = _get(prev_body, pp[:2]), _get(cur_body, cp[:2])
        if isinstance(ca, dict) and isinstance(cb, dict):
            skip = {"content", "tool_calls", "id", "status"}
            ca = {k: v for k, v in ca.items() if k not in skip}
            cb = {k: v for k, v in cb.items() if k not in skip}
            found = _first_diff(ca, cb, "".join("/" + escape(p) for p in cp[:2]))
            if found is not None:
                return found
    return cur_pointer


def _first_diff(a: Any, b: Any, path: str) -> str | None:
    """Pointer (under ``path`` in b) of the first value where a and b differ, ignoring markers/nulls."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.get("type") != b.get("type"):
            return path
        for key, bv in b.items():
            if key in MARKER_KEYS or bv is None or bv == []:  # normalised away in hashes too
                continue
            av = a.get(key)
            if av is None or av == []:
                return f"{path}/{escape(key)}"
            found = _first_diff(av, bv, f"{path}/{escape(key)}")
            if found is not None:
                return found
        if any(k not in MARKER_KEYS and v not in (None, []) and b.get(k) in (None, []) for k, v in a.items()):
            return path  # a key was removed: the containing object differs
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (av, bv) in enumerate(zip(a, b, strict=False)):
            found = _first_diff(av, bv, f"{path}/{i}")
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{path}/{len(a)}" if len(b) > len(a) else path
        return None
    if isinstance(a, str) and isinstance(b, list) and len(b) == 1 and isinstance(b[0], dict):
        return None if b[0].get("text") == a and b[0].get("type") == "text" else path  # string == one text block
    if isinstance(b, str) and isinstance(a, list) and len(a) == 1 and isinstance(a[0], dict):
        return None if a[0].get("text") == b and a[0].get("type") == "text" else path
    return None if a == b else path
