"""Which optional analysis columns a capture file has, and SQL that reads them when it does.

The analysis columns come with later migrations; a file written before them (or by an older
version) lacks them until it is opened for writing. Readers ask ``call_columns`` first instead of
assuming a schema and show a dash for what is missing.
"""

from __future__ import annotations

from typing import Any

from ctxscope.inspector.store.db import Db

# The members the analysis leaves out of its JSON columns when they are null, empty or (token
# counts) zero, and what they stand for (docs/architecture.md, "Body storage").
_CACHE_MEMBERS = (
    "verdict",
    "lost_tokens",
    "lost_cost_usd",
    "unpriced",  # why lost_cost_usd is null (analyses/prices.py)
    "break_pointer",
    "break_segment_kind",
    "before_prev_last_breakpoint",
    "detail",
    "provider_diagnostics",
    "expected_read",
    "provider_agreement",
)
_PREDICTION_MEMBERS = (
    "family",
    "reason",
    "predicted_read",
    "predicted_write",
    "cacheable_prefix_tokens",
    "minimum",
    "ttl",
    "gap_seconds",
)
TOKEN_CATEGORIES = (
    "system",
    "tools",
    "user_text",
    "assistant_text",
    "tool_call",
    "tool_result",
    "reminder",
    "image",
    "thinking",
    "other",
)


def with_defaults(column: str, value: Any) -> Any:
    """A decoded analysis column with the members its compact form left out put back."""
    if not isinstance(value, dict):
        return value
    if column == "cache":
        names = _CACHE_MEMBERS + (_PREDICTION_MEMBERS if "family" in value else ())
        return {**dict.fromkeys(names), **value}
    if column == "relation_detail":
        return {"detail": None, "shared_segments": value.get("shared_segments"), "marker_moves": [], **value}
    if column == "tokens_by_category":
        return {**dict.fromkeys(TOKEN_CATEGORIES, 0), **value}
    return value


def call_columns(db: Db) -> frozenset[str]:
    return frozenset(r[1] for r in db.execute("PRAGMA table_info(calls)").fetchall())


def verdict_sql(cols: frozenset[str]) -> str | None:
    """SQL for the verdict name, whether the column holds a bare name or a JSON object."""
    if "cache_verdict" not in cols:
        return None
    return (
        "(CASE WHEN json_valid(cache_verdict) AND json_type(cache_verdict) = 'object' "
        "THEN json_extract(cache_verdict, '$.verdict') ELSE cache_verdict END)"
    )
