"""Archiving old tool results (the first stage): no model call, just smaller history.

The plan exists only when the tool-result text in history exceeds ``watermarkKiB``. Candidates
skip unfinished rounds, the last ``keepRecentRounds`` rounds, control tools (skill, ask_user,
todowrite, goal and plan tools), errored results, results under ``minCandidateKiB`` and results
already archived; the plan holds only if it saves at least ``minSavingsKiB``. With a ``read``
tool each candidate goes to an artifact and leaves a recoverable receipt (``tool_archive``);
without one it leaves a placeholder that says it cannot be recovered (``tool_trim``). Whether the
smaller history is admitted (fits the input and byte limits) is the engine's decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from ...core.budget import ContextSettings
from ...core.messages import Message, ToolResult
from ...core.state import SessionView
from ..tool_output_budget import receipt, write_artifact
from .history import map_results, result_bytes, tool_result_bytes, tool_rounds

CONTROL_TOOLS = frozenset(
    {
        "skill",
        "ask_user",
        "todowrite",
        "todoread",
        "goal",
        "plan",
        "update_plan",
        "enter_plan_mode",
        "exit_plan_mode",
        "set_goal",
        "update_goal",
        "complete_goal",
    }
)
RECEIPT_BYTES = 1100  # what a receipt costs, for planning before the artifact paths exist
TOOL_ARCHIVE: Final = "tool_archive"
TOOL_TRIM: Final = "tool_trim"


def is_control_tool(name: str) -> bool:
    n = name.lower()
    return n in CONTROL_TOOLS or n.startswith(("goal_", "plan_")) or n.endswith(("_goal", "_plan"))


@dataclass(frozen=True)
class Candidate:
    message: int  # index of the tool message
    block: int  # index of the result in that message's content
    tool: str
    call_id: str
    bytes: int


@dataclass(frozen=True)
class ArchivePlan:
    holds: bool
    reason: str  # why it holds or not
    tool_bytes: int
    candidates: tuple[Candidate, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def candidate_bytes(self) -> int:
        return sum(c.bytes for c in self.candidates)

    @property
    def planned_savings(self) -> int:
        return self.candidate_bytes - RECEIPT_BYTES * len(self.candidates)


def plan_archive(messages: Sequence[Message], settings: ContextSettings) -> ArchivePlan:
    total = tool_result_bytes(messages)
    if not settings.enabled:
        return ArchivePlan(False, "disabled", total)
    if total <= settings.watermark_kib * 1024:
        return ArchivePlan(False, "under_watermark", total)
    rounds = tool_rounds(messages)
    finished = [r for r in rounds if r.finished]
    keep = settings.keep_recent_rounds
    recent = {r.assistant for r in finished[-keep:]} if keep > 0 else set()
    skipped: Counter = Counter()
    candidates: list[Candidate] = []
    for r in rounds:
        if r.tool is None:
            skipped["unfinished"] += 1
            continue
        results = [(j, b) for j, b in enumerate(messages[r.tool].content) if isinstance(b, ToolResult)]
        if not r.finished:
            skipped["unfinished"] += len(results)
            continue
        if r.assistant in recent:
            skipped["recent"] += len(results)
            continue
        for j, res in results:
            reason = _skip_reason(res, settings)
            if reason:
                skipped[reason] += 1
            else:
                candidates.append(Candidate(r.tool, j, res.name, res.tool_call_id, result_bytes(res)))
    plan = ArchivePlan(False, "", total, tuple(candidates), dict(skipped))
    if not candidates:
        return replace(plan, reason="no_candidates")
    if plan.planned_savings < settings.min_savings_kib * 1024:
        return replace(plan, reason="savings_too_small")
    return replace(plan, holds=True, reason="over_watermark")


def _skip_reason(res: ToolResult, settings: ContextSettings) -> str | None:
    if is_control_tool(res.name):
        return "control"
    if res.is_error:
        return "error"
    if "archived" in res.details or "trimmed" in res.details:
        return "archived"
    if result_bytes(res) < settings.min_candidate_kib * 1024:
        return "small"
    return None


@dataclass(frozen=True)
class ArchiveResult:
    mode: Literal["tool_archive", "tool_trim"]
    messages: tuple[Message, ...]
    archived: int
    saved_bytes: int
    artifacts: tuple[str, ...]
    items: tuple[dict, ...] = ()  # what was archived: tool, call id, bytes, artifact (None when trimmed)


def trim_placeholder(res: ToolResult) -> str:
    return (
        f"[An older {res.name} result ({result_bytes(res)} bytes) was removed to save context. It cannot be "
        f"recovered from here: run the tool again if you need it.]"
    )


def apply_archive(
    messages: Sequence[Message], plan: ArchivePlan, view: SessionView, *, has_read: bool, turn: int, step: int
) -> ArchiveResult:
    """Replace the plan's candidates; writes artifacts when the turn has ``read`` (OSError falls back to trim)."""
    wanted = {(c.message, c.block) for c in plan.candidates}
    artifacts: list[str] = []
    items: list[dict] = []
    saved = 0

    def swap(i: int, j: int, res: ToolResult) -> ToolResult:
        nonlocal saved
        if (i, j) not in wanted:
            return res
        size = result_bytes(res)
        text: str | None = None
        mark: dict[str, dict[str, object]] = {}
        if has_read:
            try:
                art = write_artifact(view, res.content, turn=turn, step=step, tool=res.name, call_id=res.tool_call_id)
            except OSError:
                art = None
            if art is not None:
                text = receipt(
                    res.name, art, is_error=res.is_error, why="Older tool result moved to a file to save context"
                )
                mark = {"archived": {"artifact": str(art.path), "bytes": size}}
                artifacts.append(str(art.path))
        if text is None:
            text, mark = trim_placeholder(res), {"trimmed": {"bytes": size}}
        saved += size - len(text.encode("utf-8"))
        items.append(
            {
                "tool": res.name,
                "call_id": res.tool_call_id,
                "bytes": size,
                "artifact": mark.get("archived", {}).get("artifact"),
            }
        )
        return replace(res, content=text, details={**res.details, **mark})

    out = map_results(messages, swap)
    return ArchiveResult(
        TOOL_ARCHIVE if has_read and artifacts else TOOL_TRIM,
        tuple(out),
        len(wanted),
        saved,
        tuple(artifacts),
        tuple(items),
    )
