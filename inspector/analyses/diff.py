"""Structured diff of two calls' prompts: where the newer one first departs from the older one.

``diff_prompts`` compares call ``a`` against ``b`` (by default ``a``'s predecessor) on
their canonical prompts, the same view the stored relation was computed on: the first divergence
with its pointer into each body and both values there, the content ``a`` added and the content of
``b`` it no longer has (content both hold but re-sent after the divergence is only counted),
cache-marker moves listed apart (they never make a call DIVERGED), and the parameters and cache
policy that changed. Long values are clipped to ``max_chars``.
"""

from __future__ import annotations

import json
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment, escape
from ctxscope.inspector.analyses.relation import CallContext, Relation, classify, compare, policy_signature
from ctxscope.vocab.kinds import RelationKind

_COUNTER = TokenCounter(max_entries=20_000)  # ~360 B a count: at most ~7 MB, emptied by forget_counts


def forget_counts() -> None:
    """Let go of the counts remembered so far (an idle reader: docs/architecture.md, "Memory")."""
    _COUNTER.clear()


_MISSING = object()
_EXCERPT = 80
_SIDE_KEYS = ("id", "session", "seq", "thread", "provider", "api", "model", "started_at", "relation", "pointer")


def _clip(value: Any, max_chars: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + f"… [{len(value) - max_chars} more chars]"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > max_chars:
            return {"clipped": True, "chars": len(text), "json_prefix": text[:max_chars]}
    return value


def _resolve(body: Any, pointer: str | None) -> Any:
    if pointer is None or body is None:
        return _MISSING
    try:
        return JsonPointer(pointer).resolve(body)
    except (JsonPointerException, KeyError, IndexError, TypeError):
        return _MISSING


def _parts(pointer: str) -> list[str]:
    return JsonPointer(pointer).parts


def _join(parts: list[str]) -> str:
    return "".join("/" + escape(p) for p in parts)


def _counterpart(pointer: str, a_seg: Segment | None, b_seg: Segment | None) -> str | None:
    """The place in b that corresponds to ``pointer`` in a, mapped through the two segments' pointers."""
    if b_seg is None:
        return None
    if a_seg is None:
        return b_seg.pointer
    p, ap, bp = _parts(pointer), _parts(a_seg.pointer), _parts(b_seg.pointer)
    common = 0
    while common < min(len(p), len(ap)) and p[common] == ap[common]:
        common += 1
    if common == 0:
        return b_seg.pointer
    # Inside the segment: the same path below b's segment; above it (the message's role, say):
    # the same depth of b's pointer.
    mapped = bp if common == len(ap) else bp[:common]
    return _join(mapped + p[common:])


def _text_offset(a: Any, b: Any) -> dict | None:
    """Where two differing strings first differ, with a little context on each side."""
    if not isinstance(a, str) or not isinstance(b, str):
        return None
    i, n = 0, min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    lo = max(0, i - _EXCERPT)
    return {"offset": i, "a_excerpt": a[lo : i + _EXCERPT], "b_excerpt": b[lo : i + _EXCERPT]}


def _segment_row(prompt: CanonicalPrompt, index: int, max_chars: int) -> dict:
    seg = prompt.segments[index]
    row = {
        "segment": index,
        "pointer": seg.pointer,
        "kind": seg.kind,
        "role": seg.role,
        "tokens": _COUNTER.count_segment(seg).total,
        "preview": _clip(seg.text, min(200, max_chars)),
    }
    if seg.name:
        row["name"] = seg.name
    return row


def _changes(a: CanonicalPrompt, b: CanonicalPrompt, k: int, diverged: bool, max_chars: int) -> dict:
    """What a added and what of b it dropped, after the shared prefix. Past a divergence, content
    both still hold (re-sent after the change, so no longer read from cache) is only counted."""
    if not diverged:
        added = [_segment_row(a, i, max_chars) for i in range(k, len(a.segments))]
        return {"added": added, "removed": [], "resent": {"segments": 0, "tokens": 0}}
    in_a, in_b = set(a.hashes), set(b.hashes)
    added = [_segment_row(a, i, max_chars) for i in range(k, len(a.segments)) if a.hashes[i] not in in_b]
    removed = [_segment_row(b, i, max_chars) for i in range(k, len(b.segments)) if b.hashes[i] not in in_a]
    resent = [i for i in range(k, len(a.segments)) if a.hashes[i] in in_b]
    tokens = sum(_COUNTER.count_segment(a.segments[i]).total for i in resent)
    return {"added": added, "removed": removed, "resent": {"segments": len(resent), "tokens": tokens}}


def _side(row: dict) -> dict:
    return {k: row.get(k) for k in _SIDE_KEYS}


def _changed(a: dict, b: dict) -> dict:
    return {k: {"a": a.get(k), "b": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def diff_prompts(a_row: dict, b_row: dict | None, a_body: Any, b_body: Any, *, max_chars: int = 4000) -> dict:
    """Call ``a`` (its stored row and parsed request body) against ``b``; ``b_row`` None: a has no predecessor.

    The result's ``pointer`` is the first divergence in a's body (None when a continues b), and
    ``first_divergence`` holds both sides there. Without a ``b`` (a first call), ``b`` is None and
    ``reason`` says why.
    """
    out: dict[str, Any] = {
        "a": _side(a_row),
        "b": None,
        "b_is_predecessor": False,
        "relation": None,
        "epoch_reason": None,
        "detail": None,
        "pointer": None,
        "reason": None,
    }
    if b_row is None:
        out["reason"] = "this call has no predecessor"
        return out
    out["b"] = _side(b_row)
    out["b_is_predecessor"] = a_row.get("predecessor") == b_row.get("id")
    a_prompt, b_prompt = canonicalize(a_row.get("api"), a_body), canonicalize(b_row.get("api"), b_body)
    rel = classify(
        CallContext(b_prompt, b_row.get("provider") or "", b_row.get("api"), 0, b_body),
        CallContext(a_prompt, a_row.get("provider") or "", a_row.get("api"), 0, a_body),
    )
    out.update(relation=rel.kind, epoch_reason=rel.epoch_reason, detail=rel.detail)
    if a_prompt is None or b_prompt is None:
        out["reason"] = "a request body is not a known prompt shape: compare the raw bodies"
        return out
    if (
        rel.kind not in (RelationKind.IDENTICAL, RelationKind.APPEND_ONLY, RelationKind.DIVERGED)
        and rel.epoch_reason is None
    ):
        rel = compare(b_prompt, a_prompt, b_body, a_body)  # server-held prefix: still show the bodies' difference
    out.update(_compare(a_prompt, b_prompt, a_body, b_body, rel, max_chars))
    return out


def _compare(a: CanonicalPrompt, b: CanonicalPrompt, a_body: Any, b_body: Any, rel: Relation, max_chars: int) -> dict:
    k = rel.shared_segments
    a_tokens = _COUNTER.count_prompt(a)
    first = None
    diverged = k < len(b.segments)
    if diverged:
        a_seg = a.segments[k] if k < len(a.segments) else None
        b_seg = b.segments[k]
        pointer_a = rel.pointer or (a_seg.pointer if a_seg else None)
        pointer_b = _counterpart(pointer_a, a_seg, b_seg) if pointer_a else b_seg.pointer
        va, vb = _resolve(a_body, pointer_a), _resolve(b_body, pointer_b)
        first = {
            "segment": k,
            "kind_a": a_seg.kind if a_seg else None,
            "kind_b": b_seg.kind,
            "pointer_a": pointer_a,
            "pointer_b": pointer_b,
            "a": None if va is _MISSING else _clip(va, max_chars),
            "b": None if vb is _MISSING else _clip(vb, max_chars),
            "a_missing": va is _MISSING,
            "b_missing": vb is _MISSING,
            "text": _text_offset(va, vb),
        }
    moved = [
        {"segment": i, "pointer": a.segments[i].pointer, "a": a.segments[i].breakpoint, "b": b.segments[i].breakpoint}
        for i in range(k)
        if a.segments[i].breakpoint != b.segments[i].breakpoint
    ]
    return {
        "pointer": first["pointer_a"] if first else None,
        "shared_segments": k,
        "shared_tokens": a_tokens.prefix_tokens(k),
        "segments": {"a": len(a.segments), "b": len(b.segments)},
        "tokens": {"a": a_tokens.total, "b": _COUNTER.count_prompt(b).total},
        "first_divergence": first,
        **_changes(a, b, k, diverged, max_chars),
        "markers": {
            "moved": moved,
            "a": [bp["pointer"] for bp in a.cache_policy.get("breakpoints", ())],
            "b": [bp["pointer"] for bp in b.cache_policy.get("breakpoints", ())],
        },
        "params_changed": _changed(a.params, b.params),
        "cache_policy_changed": _changed(policy_signature(a), policy_signature(b)),
    }
