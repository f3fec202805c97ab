"""Context budget lines and the context-management settings (the shared ``toolResultCompaction`` keys and ours).

Two lines per model: ``provider_input_limit`` (the most input a request may carry) and
``automatic_trigger_at`` (where automatic compaction starts, leaving room for the answer and a
proactive reserve). The formula is the contract; ``output_floor`` is not given by the source, so we
choose ``min(configured_output, 4096)``: when the window is too small to reserve the full
configured output, reserve a 4096-token answer (enough for a checkpoint summary's worth of work
or a tool call) rather than the whole configured limit, and never more than was configured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

RESERVE_TOKENS = 16384
SAFETY_MARGIN_TOKENS = 2048
PROVIDER_INPUT_RATIO = 0.95
OUTPUT_FLOOR_TOKENS = 4096
CHECKPOINT_OUTPUT_CAP = math.floor(0.8 * RESERVE_TOKENS)  # 13107

# Request body size limits in bytes, by provider name or wire API (first hit wins: provider, then api).
# Anthropic documents 32 MB for the Messages API; OpenAI does not publish one, so the same bound is used.
DEFAULT_BYTE_LIMIT = 32 * 1000 * 1000
PROVIDER_BYTE_LIMITS = {
    "anthropic": 32 * 1000 * 1000,
    "openai-chat": DEFAULT_BYTE_LIMIT,
    "openai-responses": DEFAULT_BYTE_LIMIT,
}


def output_floor(configured_output: int) -> int:
    """The answer room reserved when the window cannot hold the full configured output (documented above)."""
    return max(1, min(configured_output, OUTPUT_FLOOR_TOKENS))


@dataclass(frozen=True)
class BudgetLines:
    window: int
    configured_output: int
    effective_output: int
    provider_input_limit: int
    automatic_trigger_at: int


def budget_lines(
    window: int,
    configured_output: int,
    *,
    reserve: int = RESERVE_TOKENS,
    safety: int = SAFETY_MARGIN_TOKENS,
    ratio: float = PROVIDER_INPUT_RATIO,
) -> BudgetLines:
    """The budget lines (docs/architecture.md, "Budget lines").

    128000/16000 -> 109952/96000; 200000/32000 -> 165952/165952.
    """
    configured_output = max(1, int(configured_output))
    full_output_input_budget = window - configured_output - safety
    effective = configured_output if full_output_input_budget >= reserve else output_floor(configured_output)
    limit = max(1, min(math.floor(window * ratio), window - reserve, window - effective - safety))
    proactive = min(2 * reserve, math.floor(window / 4))
    trigger = min(limit, max(1, window - proactive))
    return BudgetLines(window, configured_output, effective, limit, trigger)


def checkpoint_output_limit(model_output_limit: int) -> int:
    """The checkpoint's output limit: min(floor(0.8 * 16384) = 13107, the model's output limit)."""
    return max(1, min(CHECKPOINT_OUTPUT_CAP, int(model_output_limit)))


def byte_limit(provider: str, api: str, overrides: Mapping[str, int] | None = None) -> int:
    table = {**PROVIDER_BYTE_LIMITS, **(overrides or {})}
    return int(table.get(provider) or table.get(api) or DEFAULT_BYTE_LIMIT)


@dataclass(frozen=True)
class ContextSettings:
    """``toolResultCompaction`` (the shared keys, defaults from the source) plus our own knobs.

    ``enabled`` switches only the archive stage, as in the source; automatic checkpoints stay on
    unless ``auto_compact`` is false. ``checkpoint_mode`` "reuse" keeps the live system prompt and
    tool declarations as the checkpoint request's prefix (prompt cache reuse), "separate" sends the
    checkpoint system prompt without tools (the checkpoint request's separate mode).
    """

    max_inline_kib: float = 64
    mcp_details_max_inline_kib: float = 32
    watermark_kib: float = 256
    min_savings_kib: float = 256
    min_candidate_kib: float = 2
    keep_recent_rounds: int = 5
    enabled: bool = True
    auto_compact: bool = True
    checkpoint_mode: str = "reuse"
    checkpoint_system_prompt_file: str | None = None
    keep_screenshots: int = 2
    thrash_margin: float = 0.2  # a compaction must leave at least this share of the trigger line free
    byte_limits: Mapping[str, int] = field(default_factory=dict)

    _ALIASES: ClassVar[dict[str, str]] = {
        "maxInlineKiB": "max_inline_kib",
        "mcpDetailsMaxInlineKiB": "mcp_details_max_inline_kib",
        "watermarkKiB": "watermark_kib",
        "minSavingsKiB": "min_savings_kib",
        "minCandidateKiB": "min_candidate_kib",
        "keepRecentRounds": "keep_recent_rounds",
    }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, *, strict: bool = True) -> ContextSettings:
        """Settings from a dict (``toolResultCompaction`` camelCase keys accepted); unknown keys raise if strict."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            name = cls._ALIASES.get(key, key)
            if name not in known or name.startswith("_"):
                if strict:
                    raise ValueError(f"unknown context setting {key!r}")
                continue
            values[name] = value
        if values.get("checkpoint_mode", "reuse") not in ("reuse", "separate"):
            raise ValueError("checkpoint_mode must be 'reuse' or 'separate'")
        return cls(**values)

    @property
    def max_inline_bytes(self) -> int:
        return int(self.max_inline_kib * 1024)
