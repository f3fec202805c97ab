"""Two stored calls' prompts compared: the store's rows and bodies, then the pure diff (``analyses.diff``)."""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.analyses.diff import diff_prompts
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.views import predecessor_or_previous


def diff_calls(db: sqlite_utils.Database, a_id: str, b_id: str | None = None, *, max_chars: int = 4000) -> dict:
    """Call ``a`` against ``b`` (default: a's predecessor, else the previous call of its session).
    KeyError for an unknown call id."""
    a_full = queries.resolve_call_id(db, a_id)
    if a_full is None:
        raise KeyError(f"no call {a_id!r}")
    b_full = queries.resolve_call_id(db, b_id) if b_id is not None else predecessor_or_previous(db, a_full)
    if b_id is not None and b_full is None:
        raise KeyError(f"no call {b_id!r}")
    a_row = queries.get_call(db, a_full) or {}
    if b_full is None:
        return diff_prompts(a_row, None, None, None, max_chars=max_chars)
    b_row = queries.get_call(db, b_full) or {"id": b_full}
    a_body, b_body = queries.get_request_json(db, a_full), queries.get_request_json(db, b_full)
    return diff_prompts(a_row, b_row, a_body, b_body, max_chars=max_chars)
