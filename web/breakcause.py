"""What the diff page says about a break: declared by the client, inferred, or accidental.

A call's markers describe what happened between it and its predecessor: a compaction or an archive
effect the client declared (our agent's ``x-ctxscope-event`` headers), one inferred from the
prompts, or nothing that explains a prompt that changed before its end: an accident, the kind of
break a fix should remove. Two calls that are not (predecessor, call) are compared all the same,
but only the later call's own markers are known, so the page says so.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.store import queries
from ctxscope.vocab.kinds import MarkerKind, RelationKind

# Effects that rewrite the history the provider cached: a break they cause is intended.
CONTEXT_EFFECTS = frozenset({
    MarkerKind.COMPACTION, MarkerKind.CHECKPOINT, MarkerKind.TOOL_RESULTS_ARCHIVED,
    MarkerKind.TOOL_OUTPUT_EXTERNALIZED,
})  # fmt: skip


def break_cause(new: dict, old_id: str) -> dict:
    """``{cause, effects, consecutive}``: cause is none, declared, inferred, accidental or unknown."""
    consecutive = new.get("predecessor") == old_id
    relation = new.get("relation")
    raw = new.get("markers")
    markers: list = raw if isinstance(raw, list) else []
    effects = [m for m in markers if isinstance(m, dict) and m.get("kind") in CONTEXT_EFFECTS]
    declared = [m for m in effects if (m.get("detail") or {}).get("declared")]
    shown = [{"kind": m.get("kind"), "pointer": m.get("pointer"),
              "declared": bool((m.get("detail") or {}).get("declared"))} for m in effects]  # fmt: skip
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
    row = queries.get_call(db, result["new"]["id"]) or {}
    result["break"] = break_cause(row, result["old"]["id"])
    result["same_session"] = result["old"].get("session") == result["new"].get("session")
    return result
