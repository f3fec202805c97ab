"""The diff view's data: a call against its predecessor (or any other call), first difference first.

The structural diff is ours (``jsondiff``); the inspector's own ``diff_calls`` (first divergence
pointer, marker moves) is included as ``inspector`` and its pointer decides where the view opens,
since it is computed on the same canonical prompt as the relation.

What the page says about a break (``with_break_cause``): declared by the client, inferred, or
accidental. A call's markers describe what happened between it and its predecessor: a compaction or
an archive effect the client declared (our agent's ``x-ctxscope-event`` headers), one inferred from
the prompts, or nothing that explains a prompt that changed before its end: an accident, the kind of
break a fix should remove. Two calls that are not (predecessor, call) are compared all the same, but
only the later call's own markers are known, so the page says so.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.reading.calldiff import diff_calls
from ctxscope.inspector.store import queries as q
from ctxscope.inspector.store.columns import call_columns
from ctxscope.inspector.store.views import diff_base
from ctxscope.proxy.redaction.mask import mask_keys_in
from ctxscope.vocab.kinds import MarkerKind, RelationKind
from ctxscope.web.fields import normalise_call
from ctxscope.web.jsondiff import BUDGET_CHARS, diff_bodies


def _side(db: sqlite_utils.Database, call_id: str, cols: frozenset[str]) -> dict:
    row = q.get_call(db, call_id) or {}
    keep = (
        "id",
        "session",
        "seq",
        "model",
        "api",
        "started_at",
        "relation",
        "pointer",
        "epoch_reason",
        "predecessor",
        "cache_verdict",
        "cache",
        "cache_lost_tokens",
        "cache_lost_usd",
        "tokens_estimated",
        "markers",
    )  # markers: the page says which effects the client declared
    return normalise_call({k: row.get(k) for k in keep if k in row or k in cols})


def call_diff(
    db: sqlite_utils.Database, new_id: str, old_id: str | None = None, change: int | None = None
) -> dict | None:
    """Diff ``old_id`` (default: the predecessor) -> ``new_id``; None when a call is unknown.

    The changes carry changed regions only (``jsondiff``); ``change`` asks for that one change's
    region, one the whole answer left ``deferred``."""
    new_full = q.resolve_call_id(db, new_id)
    if new_full is None:
        return None
    old_full = q.resolve_call_id(db, old_id) if old_id else diff_base(db, new_full)
    cols = call_columns(db)
    new_side = _side(db, new_full, cols)
    if old_full is None:
        return {
            "old": None,
            "new": new_side,
            "diff": None,
            "inspector": None,
            "reason": "this call has no predecessor" if not old_id else f"no call {old_id!r}",
        }
    old_side = _side(db, old_full, cols)
    # keys masked before the changes are cut to their windows, so no window ends inside a key
    old_body = mask_keys_in(q.get_request_json(db, old_full))
    new_body = mask_keys_in(q.get_request_json(db, new_full))
    if old_body is None or new_body is None:
        return {
            "old": old_side,
            "new": new_side,
            "diff": None,
            "inspector": None,
            "reason": "a request body is not JSON: compare the raw bytes",
        }
    diff = diff_bodies(old_body, new_body, budget=None if change is not None else BUDGET_CHARS)
    del old_body, new_body
    if change is not None:
        if not 0 <= change < len(diff["changes"]):
            raise IndexError(f"no change {change}: the diff has {len(diff['changes'])}")
        return {"old": old_side, "new": new_side, "change": change, "diff": {"changes": [diff["changes"][change]]}}
    try:
        inspector = diff_calls(db, new_full, old_full)  # (newer a, older b)
    except Exception as e:  # the inspector's diff failing must not take the structural one down
        inspector = {"error": f"{type(e).__name__}: {e}"}
    focus = diff["first_pointer"]
    analysed = new_side.get("pointer") if new_side.get("predecessor") == old_full else None
    for candidate in (
        (inspector or {}).get("pointer") if isinstance(inspector, dict) else None,
        (inspector or {}).get("first_pointer") if isinstance(inspector, dict) else None,
        analysed,
    ):
        if isinstance(candidate, str) and candidate:
            focus = candidate
            break
    return {"old": old_side, "new": new_side, "diff": diff, "inspector": inspector, "focus": focus, "reason": None}


# Effects that rewrite the history the provider cached: a break they cause is intended.
CONTEXT_EFFECTS = frozenset(
    {
        MarkerKind.COMPACTION,
        MarkerKind.CHECKPOINT,
        MarkerKind.TOOL_RESULTS_ARCHIVED,
        MarkerKind.TOOL_OUTPUT_EXTERNALIZED,
    }
)


def break_cause(new: dict, old_id: str) -> dict:
    """``{cause, effects, consecutive}``: cause is none, declared, inferred, accidental or unknown."""
    consecutive = new.get("predecessor") == old_id
    relation = new.get("relation")
    raw = new.get("markers")
    markers: list = raw if isinstance(raw, list) else []
    effects = [m for m in markers if isinstance(m, dict) and m.get("kind") in CONTEXT_EFFECTS]
    declared = [m for m in effects if (m.get("detail") or {}).get("declared")]
    shown = [
        {"kind": m.get("kind"), "pointer": m.get("pointer"), "declared": bool((m.get("detail") or {}).get("declared"))}
        for m in effects
    ]
    if consecutive and relation in (RelationKind.IDENTICAL, RelationKind.APPEND_ONLY):
        cause = "none"
    elif not consecutive:
        cause = "unknown"
    elif declared:
        cause = "declared"
    elif effects:
        cause = "inferred"
    elif relation == RelationKind.DIVERGED:
        cause = "accidental"
    else:
        cause = "unknown"
    return {"cause": cause, "effects": shown, "consecutive": consecutive}


def with_break_cause(db: sqlite_utils.Database, result: dict | None) -> dict | None:
    """The diff view's answer with ``break`` added (the later call's markers read back)."""
    if result is None or not result.get("old") or not result.get("new"):
        return result
    row = q.get_call(db, result["new"]["id"]) or {}
    result["break"] = break_cause(row, result["old"]["id"])
    result["same_session"] = result["old"].get("session") == result["new"].get("session")
    return result
