"""``/context`` and ``ctxscope agent context SESSION``: how full the context is, and of what.

Sections: the system prompt split into SYSTEM_PROMPT (the runtime's own), MEMORY, SKILLS and OTHER
(extension contributions, classified by their markers), then TOOLS and MESSAGES. With a valid
usage anchor the provider's figure is the truth: total = input + cache read + cache write of the
last answer's request, the sections are scaled to it, and the answer itself plus everything after
it count as MESSAGES (source ``PROVIDER_USAGE_ANCHORED``). Without one — right after a compaction
the anchor is invalid by design — it is the local estimate of the current history
(``LOCAL_ESTIMATE``), so the figure is right at once instead of stale until the next call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.budget import budget_lines
from ..core.estimate import (
    AnchorBinding,
    UsageAnchor,
    messages_tokens,
    prefix_hash,
    text_tokens,
    tools_json,
    valid_anchor_index,
)
from ..core.messages import Message
from ..core.model import ToolSpec
from ..core.state import ModelInfo
from .compaction.outcome import ANCHOR_KEY, STATE_KEY

SECTIONS = ("SYSTEM_PROMPT", "MEMORY", "SKILLS", "OTHER", "TOOLS", "MESSAGES")
_MEMORY = re.compile(r"<memory|^#+\s*memory\b|AGENTS\.md|CLAUDE\.md|project instructions", re.IGNORECASE | re.MULTILINE)
_SKILLS = re.compile(r"<skills?\b|^#+\s*skills?\b|available skills", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class ContextReport:
    session_id: str
    provider: str
    api: str
    model: str
    window: int
    used: int
    source: str
    sections: Mapping[str, int]
    trigger_at: int
    input_limit: int
    compaction: Mapping[str, Any] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        return max(0, self.window - self.used)

    @property
    def percent(self) -> float:
        return round(100.0 * self.used / self.window, 1) if self.window else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "sections": dict(self.sections),
            "compaction": dict(self.compaction),
            "remaining": self.remaining,
            "percent": self.percent,
        }

    def render(self) -> str:
        c = self.compaction
        auto = "on" if c.get("auto", "on") != "off" else f"off ({c.get('reason', 'stopped')})"
        last = c.get("last") or {}
        if last:
            what = f"{last.get('stage')} {last.get('status')}"
            if last.get("rung"):
                what += f" (rung {last['rung']}, {last.get('validation')})"
            if last.get("error"):
                what += f": {last['error']}"
            if last.get("tokens_after") is not None:
                what += f", {last.get('tokens_before')} -> {last['tokens_after']} tokens"
            what += f" at turn {last.get('turn')}"
        else:
            what = "none yet"
        lines = [
            f"context · session {self.session_id} · {self.model} ({self.provider}/{self.api})",
            f"used {self.used:,} of {self.window:,} tokens ({self.percent}%) · remaining {self.remaining:,} "
            f"· source {self.source}",
            f"trigger line {self.trigger_at:,} · input limit {self.input_limit:,}",
            f"compaction: automatic {auto} · last: {what}",
        ]
        lines += [f"  {name:<14}{self.sections.get(name, 0):>10,}" for name in SECTIONS]
        lines.append("(message contents are not shown)")
        return "\n".join(lines)


def system_sections(base: str, system: str) -> dict[str, int]:
    """SYSTEM_PROMPT for the runtime's own prompt; extension parts split by paragraph and classified."""
    out = {"SYSTEM_PROMPT": 0, "MEMORY": 0, "SKILLS": 0, "OTHER": 0}
    rest = system
    if base and system.startswith(base):
        out["SYSTEM_PROMPT"] = text_tokens(base)
        rest = system[len(base) :]
    for part in (p for p in rest.split("\n\n") if p.strip()):
        key = "MEMORY" if _MEMORY.search(part) else "SKILLS" if _SKILLS.search(part) else "OTHER"
        out[key] += text_tokens(part)
    return out


def build_report(
    *,
    session_id: str,
    info: ModelInfo,
    base_system: str,
    system: str,
    tools: Sequence[ToolSpec],
    messages: Sequence[Message],
    state: Mapping[str, Any],
    epoch: int | None = None,
) -> ContextReport:
    sections: dict[str, int] = system_sections(base_system, system)
    sections["TOOLS"] = text_tokens(tools_json(tools)) if tools else 0
    anchor = UsageAnchor.from_dict(state.get(ANCHOR_KEY))
    binding = AnchorBinding(info.provider, info.api, info.model, prefix_hash(system, tools))
    idx = valid_anchor_index(messages, anchor, binding, epoch)
    if idx is None or anchor is None:
        sections["MESSAGES"] = messages_tokens(messages)
        source = "LOCAL_ESTIMATE"
    else:
        sections["MESSAGES"] = messages_tokens(messages[:idx])
        estimated = sum(sections.values())
        scale = anchor.input_tokens / estimated if estimated else 1.0
        scaled = {k: round(v * scale) for k, v in sections.items() if k != "MESSAGES"}
        scaled["MESSAGES"] = (
            anchor.input_tokens - sum(scaled.values()) + anchor.output_tokens + messages_tokens(messages[idx + 1 :])
        )
        sections, source = scaled, "PROVIDER_USAGE_ANCHORED"
    lines = budget_lines(info.context_window, info.max_output_tokens)
    stored = state.get(STATE_KEY)
    compaction = stored if isinstance(stored, dict) else {}
    return ContextReport(
        session_id,
        info.provider,
        info.api,
        info.model,
        info.context_window,
        sum(sections.values()),
        source,
        {k: sections.get(k, 0) for k in SECTIONS},
        lines.automatic_trigger_at,
        lines.provider_input_limit,
        {k: v for k, v in compaction.items() if k != "auto_turns"},
    )


def report_json(report: ContextReport) -> str:
    return json.dumps(report.to_dict(), ensure_ascii=False, indent=2)
