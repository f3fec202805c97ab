"""The diff view's data: a call against its predecessor (or any other call), first difference first.

The structural diff is ours (``jsondiff``); the inspector's own ``diff_calls`` (first divergence
pointer, marker moves) is included as ``inspector`` and its pointer decides where the view opens,
since it is computed on the same canonical prompt as the relation.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.calldiff import diff_calls
from ctxscope.inspector.store import queries as q
from ctxscope.inspector.store.columns import call_columns
from ctxscope.inspector.store.views import diff_base
from ctxscope.web.fields import normalise_call
from ctxscope.web.jsondiff import diff_bodies


def _side(db: sqlite_utils.Database, call_id: str, cols: frozenset[str]) -> dict:
    row = q.get_call(db, call_id) or {}
    keep = ("id", "session", "seq", "model", "api", "started_at", "relation", "pointer", "epoch_reason", "predecessor",
            "cache_verdict", "cache", "cache_lost_tokens", "cache_lost_usd", "tokens_estimated",
            "markers")  # fmt: skip  # markers: the page says which effects the client declared
    return normalise_call({k: row.get(k) for k in keep if k in row or k in cols})


def call_diff(db: sqlite_utils.Database, new_id: str, old_id: str | None = None) -> dict | None:
    """Diff ``old_id`` (default: the predecessor) -> ``new_id``; None when a call is unknown."""
    new_full = q.resolve_call_id(db, new_id)
    if new_full is None:
        return None
    old_full = q.resolve_call_id(db, old_id) if old_id else diff_base(db, new_full)
    cols = call_columns(db)
    new_side = _side(db, new_full, cols)
    if old_full is None:
        return {"old": None, "new": new_side, "diff": None, "inspector": None,
                "reason": "this call has no predecessor" if not old_id else f"no call {old_id!r}"}  # fmt: skip
    old_side = _side(db, old_full, cols)
    old_body = q.get_request_json(db, old_full)
    new_body = q.get_request_json(db, new_full)
    if old_body is None or new_body is None:
        return {"old": old_side, "new": new_side, "diff": None, "inspector": None,
                "reason": "a request body is not JSON: compare the raw bytes"}  # fmt: skip
    diff = diff_bodies(old_body, new_body)
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
