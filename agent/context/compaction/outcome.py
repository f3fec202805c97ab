"""What a compaction outcome leaves behind: annotations for the next request, a history record, session state.

Session state ``compaction`` (persisted, read by /context): ``auto`` ("on" or "off"), ``reason``
when off, ``last`` (the latest outcome in brief) and ``auto_turns`` (turns of recent
line-triggered automatic compactions, for the thrash guard).
"""

from __future__ import annotations

import time
from typing import Any

from ctxscope.vocab.effects import Effect
from ctxscope.vocab.kinds import MarkerKind

from ...core.state import SessionView
from .engine import CompactionOutcome
from .events import record

STATE_KEY = "compaction"
ANCHOR_KEY = "context_anchor"


def request_effects(outcome: CompactionOutcome) -> list[Effect]:
    """The effects to declare on the first request after this outcome."""
    o = outcome
    sizes = {"tokens_before": o.tokens_before, "tokens_after": o.tokens_after}
    if o.replaced and o.stage == "archive":
        return [
            Effect(MarkerKind.COMPACTION, {"stage": "archive", "mode": o.mode, "trigger": o.trigger, **sizes}),
            Effect(
                MarkerKind.TOOL_RESULTS_ARCHIVED,
                {"mode": o.mode, "archived": o.archived, "saved_bytes": o.saved_bytes, **sizes},
            ),
        ]
    if o.replaced:
        return [
            Effect(MarkerKind.COMPACTION, {"stage": "checkpoint", "trigger": o.trigger, "rung": o.rung, **sizes}),
            Effect(
                MarkerKind.CHECKPOINT,
                {"rung": o.rung, "validation": o.validation, "mode": o.mode, "trigger": o.trigger, **sizes},
            ),
        ]
    return [
        Effect(
            MarkerKind.COMPACTION_FAILED,
            {"stage": o.stage, "error": o.error, "trigger": o.trigger, "tokens_before": o.tokens_before},
        )
    ]


def brief(outcome: CompactionOutcome, turn: int, step: int) -> dict[str, Any]:
    o = outcome
    return {
        k: v
        for k, v in {
            "stage": o.stage,
            "status": "completed" if o.replaced else "failed",
            "trigger": o.trigger,
            "mode": o.mode,
            "rung": o.rung,
            "validation": o.validation,
            "missing_sections": list(o.missing_sections) or None,
            "tokens_before": o.tokens_before,
            "tokens_after": o.tokens_after,
            "archived": o.archived or None,
            "saved_bytes": o.saved_bytes or None,
            "error": o.error,
            "detail": o.detail,
            "turn": turn,
            "step": step,
            "at": time.time(),
        }.items()
        if v is not None
    }


def record_outcome(view: SessionView, outcome: CompactionOutcome, turn: int, step: int) -> dict[str, Any]:
    """History record (with the ladder's attempts) and the session's ``compaction`` state."""
    info = brief(outcome, turn, step)
    attempts = [
        {
            "rung": a.rung,
            "mode": a.mode,
            "outcome": a.outcome,
            "tokens": a.tokens,
            "input_tokens": a.input_tokens,
            "cache_read_tokens": a.cache_read_tokens,
            "seconds": round(a.seconds, 4),
            "detail": a.detail,
        }
        for a in outcome.attempts
    ]
    kind = MarkerKind.COMPACTION_FAILED
    if outcome.replaced:
        kind = MarkerKind.TOOL_RESULTS_ARCHIVED if outcome.stage == "archive" else MarkerKind.CHECKPOINT
    record(
        view,
        kind,
        **info,
        attempts=attempts or None,
        items=[dict(i) for i in outcome.items] or None,
        timings={k: round(v, 4) for k, v in outcome.timings.items()} or None,
    )
    state = compaction_state(view)
    state["last"] = info
    view.state.set(STATE_KEY, state)
    return info


def compaction_state(view: SessionView) -> dict[str, Any]:
    state = view.state.get(STATE_KEY) or {}
    return dict(state) if isinstance(state, dict) else {}


def auto_enabled(view: SessionView) -> bool:
    return compaction_state(view).get("auto", "on") != "off"


def set_auto(view: SessionView, on: bool, reason: str | None, *, turn: int, step: int) -> None:
    state = compaction_state(view)
    state["auto"] = "on" if on else "off"
    if on:
        state.pop("reason", None)
        state["auto_turns"] = []
    else:
        state["reason"] = reason
    view.state.set(STATE_KEY, state)
    record(
        view,
        MarkerKind.COMPACTION_STOPPED if not on else "compaction_resumed",
        auto="on" if on else "off",
        reason=reason,
        turn=turn,
        step=step,
    )


def invalidate_anchor(view: SessionView) -> None:
    if view.state.get(ANCHOR_KEY) is not None:
        view.state.set(ANCHOR_KEY, None)


def describe(outcome: CompactionOutcome) -> str:
    """One line for a person (the chat REPL's /compact)."""
    o = outcome
    if o.replaced:
        how = (
            f"archive ({o.mode}, {o.archived} results)"
            if o.stage == "archive"
            else f"checkpoint at rung {o.rung} ({o.validation}, {o.mode} mode)"
        )
        return f"compacted: {how}, {o.tokens_before:,} -> {o.tokens_after:,} tokens"
    return f"compaction failed: {o.error}" + (f" ({o.detail})" if o.detail else "")
