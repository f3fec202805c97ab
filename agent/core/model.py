"""The seam between the loop and a model: request, prepared call, response, stream deltas, client protocol.

A client works in two steps so the ``on_llm_call_prepared`` observers see the exact request:
``prepare`` turns a neutral ``ModelRequest`` into the wire body (bytes) and URL, ``send`` posts it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .messages import Message


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class Usage:
    """Provider-reported usage, normalised: ``input_tokens`` includes cache reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class ModelRequest:
    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    max_output_tokens: int
    headers: Mapping[str, str] = field(default_factory=dict)  # annotation headers for this request


@dataclass(frozen=True)
class PreparedCall:
    """A request as it will go on the wire. ``headers`` never hold secrets (auth is added by ``send``)."""

    request: ModelRequest
    provider: str
    api: str
    model: str
    url: str
    body: bytes
    headers: Mapping[str, str]

    def body_json(self) -> dict[str, Any]:
        """A fresh parsed copy of the body: observers cannot change what is sent."""
        return json.loads(self.body) if self.body else {}


# Normalised stop reasons.
STOP = "stop"
TOOL_USE = "tool_use"
LENGTH = "length"


@dataclass(frozen=True)
class ModelResponse:
    message: Message  # role "assistant"
    stop_reason: str  # STOP, TOOL_USE, LENGTH or the provider's own word
    usage: Usage | None = None
    raw_stop_reason: str | None = None
    response_id: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A tool call began streaming (its arguments follow)."""

    id: str
    name: str


@dataclass(frozen=True)
class RetryNotice:
    attempt: int  # the attempt about to start (2 = first retry)
    delay: float
    error: str


StreamDelta = TextDelta | ThinkingDelta | ToolCallDelta | RetryNotice
DeltaSink = Callable[[StreamDelta], None]


class ModelClient(Protocol):
    provider: str
    api: str
    model: str
    context_window: int
    max_output_tokens: int

    def prepare(self, request: ModelRequest) -> PreparedCall: ...

    async def send(self, call: PreparedCall, on_delta: DeltaSink | None = None) -> ModelResponse: ...

    async def aclose(self) -> None: ...


def dumps(body: Any) -> bytes:
    """Deterministic compact JSON: the same history always serialises to the same bytes (stable prefix)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class ProviderError(Exception):
    """A failed model call, in words safe to show (never headers, never keys)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        kind: str = "error",
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.retryable = retryable
        self.retry_after = retry_after


class ContextOverflowError(ProviderError):
    """The prompt does not fit the model's context window (or the provider's byte limit)."""

    def __init__(self, message: str, *, status: int | None = 400) -> None:
        super().__init__(message, status=status, kind="context_overflow", retryable=False)
