"""The LLM APIs ctxscope tells apart, by the id the store records for each call."""

from __future__ import annotations

from enum import StrEnum


class Api(StrEnum):
    ANTHROPIC_MESSAGES = "anthropic.messages"
    ANTHROPIC_COUNT_TOKENS = "anthropic.count_tokens"
    OPENAI_CHAT = "openai.chat"
    OPENAI_RESPONSES = "openai.responses"
    GEMINI_GENERATE = "gemini.generate"


# The built-in simulator's route (the daemon's /u/sim): its calls cost nothing, so nothing prices
# them (docs/architecture.md, "The simulator is free").
SIMULATOR_PROVIDER = "u/sim"
