"""Reminder admission: a reminder that would push the final request over the provider input limit is dropped.

A reminder is advice; the request it rides on is the work. So before an in-turn reminder is added,
the request is estimated as context management estimates it (o200k over system prompt, tool
declarations and projected messages, ``core.estimate``) and the reminder goes in only if the total
stays within the provider input limit (docs/architecture.md, "Budget lines").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxscope.vocab.tokens import count_tokens

from ..core.budget import budget_lines
from ..core.estimate import MESSAGE_OVERHEAD, estimate_request
from ..core.messages import Message
from ..core.model import ToolSpec


def provider_input_limit(window: int, configured_output: int) -> int:
    """The provider input limit of the budget lines (128000/16000 -> 109952, 200000/32000 -> 165952)."""
    return budget_lines(window, configured_output).provider_input_limit


def request_tokens(system: str, tools: Sequence[ToolSpec], messages: Iterable[Message]) -> int:
    return estimate_request(system, tools, messages).total


def fits_reminder_in_final_request(request_tokens: int, reminder: str, limit: int) -> bool:
    """True when the request plus the reminder (as one more message) stays within ``limit`` tokens."""
    return request_tokens + count_tokens(reminder) + MESSAGE_OVERHEAD <= limit
