"""What a turn did, for displays (the CLI, an embedding app): activity events and the turn result.

These are not SPI events: they never change behaviour. A listener must be fast and must not raise
(exceptions are logged and ignored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from .messages import ToolCall, ToolResult
from .model import StreamDelta, Usage

TurnOutcome = Literal["completed", "failed", "aborted", "cancelled", "skipped", "max_steps"]
COMPLETED: Final = "completed"
FAILED: Final = "failed"
ABORTED: Final = "aborted"  # a before_llm_call handler aborted the call
CANCELLED: Final = "cancelled"  # the user (or the API) cancelled the turn
SKIPPED: Final = "skipped"
MAX_STEPS: Final = "max_steps"


@dataclass(frozen=True)
class TurnResult:
    session_id: str
    turn: int
    outcome: TurnOutcome
    reason: str | None = None
    text: str = ""  # the final answer's text
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    error_kind: str | None = None  # e.g. "context_overflow" when the provider refused the prompt

    @property
    def ok(self) -> bool:
        return self.outcome == COMPLETED


@dataclass(frozen=True)
class TurnStarted:
    session_id: str
    turn: int
    source: str
    text: str


@dataclass(frozen=True)
class StepStarted:
    turn: int
    step: int


@dataclass(frozen=True)
class ModelDelta:
    turn: int
    step: int
    delta: StreamDelta


@dataclass(frozen=True)
class ToolStarted:
    turn: int
    step: int
    call: ToolCall


@dataclass(frozen=True)
class ToolFinished:
    turn: int
    step: int
    call: ToolCall
    result: ToolResult


@dataclass(frozen=True)
class TurnFinished:
    result: TurnResult


Activity = TurnStarted | StepStarted | ModelDelta | ToolStarted | ToolFinished | TurnFinished
Listener = Callable[[Activity], None]
