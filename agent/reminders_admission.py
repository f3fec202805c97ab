"""Reminder admission (R4): a reminder that would push the final request over the provider input limit is dropped.

A reminder is advice; the request it rides on is the work. So before an in-turn reminder is added,
the request is estimated the way the provider will count it (o200k over system prompt, tool
declarations and the projected messages, C4) and the reminder goes in only if the total stays
within the provider input limit (C3). Message counts are cached per message, so a long history
costs one pass the first time and a dictionary lookup afterwards.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Iterable

from ctxscope.inspector.tokens import count_tokens

from .messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from .model import ToolSpec

RESERVE_TOKENS = 16_384
SAFETY_MARGIN_TOKENS = 2_048
PROVIDER_INPUT_RATIO = 0.95
PER_MESSAGE_OVERHEAD = 4  # role and framing tokens the wire adds around each message


def output_floor(configured_output: int) -> int:
    """The output limit kept when the full one leaves no room (C3 leaves it open; ours: at most 4096)."""
    return min(configured_output, 4096)


def provider_input_limit(window: int, configured_output: int, *, reserve: int = RESERVE_TOKENS,
                         safety: int = SAFETY_MARGIN_TOKENS) -> int:
    """C3's providerInputLimit (e.g. 128000/16000 -> 109952, 200000/32000 -> 165952)."""
    full_output_budget = window - configured_output - safety
    effective_output = configured_output if full_output_budget >= reserve else output_floor(configured_output)
    return max(1, min(int(window * PROVIDER_INPUT_RATIO), window - reserve, window - effective_output - safety))


class RequestEstimator:
    """o200k token estimate of a request; per-message counts are cached by message id."""

    def __init__(self, max_cached: int = 4096) -> None:
        self._cache: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._max = max_cached
        self._fixed: tuple[str, tuple[ToolSpec, ...], int] | None = None

    def message_tokens(self, m: Message) -> int:
        hit = self._cache.get(m.id)
        if hit is not None and hit[0] is m.content:
            self._cache.move_to_end(m.id)
            return hit[1]
        n = count_tokens(project(m)) + PER_MESSAGE_OVERHEAD
        self._cache[m.id] = (m.content, n)
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return n

    def fixed_tokens(self, system: str, tools: tuple[ToolSpec, ...]) -> int:
        if self._fixed is not None and self._fixed[0] == system and self._fixed[1] == tools:
            return self._fixed[2]
        decl = json.dumps([{"name": t.name, "description": t.description, "parameters": t.parameters}
                           for t in tools], ensure_ascii=False, sort_keys=True)
        n = count_tokens(system) + (count_tokens(decl) if tools else 0)
        self._fixed = (system, tools, n)
        return n

    def request_tokens(self, system: str, tools: tuple[ToolSpec, ...], messages: Iterable[Message]) -> int:
        return self.fixed_tokens(system, tools) + sum(self.message_tokens(m) for m in messages)


def project(m: Message) -> str:
    """The text a message contributes to the prompt (C4 projection)."""
    parts: list[str] = []
    for b in m.content:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ThinkingBlock):
            parts.append(b.thinking)
        elif isinstance(b, ToolCall):
            parts.append(b.name)
            parts.append(b.raw_arguments or json.dumps(b.arguments, ensure_ascii=False))
        elif isinstance(b, ToolResult):
            parts.append(b.content)
    return "\n".join(parts)


def fits_reminder_in_final_request(request_tokens: int, reminder: str, limit: int) -> bool:
    """True when the request plus the reminder stays within ``limit`` tokens."""
    return request_tokens + count_tokens(reminder) + PER_MESSAGE_OVERHEAD <= limit
