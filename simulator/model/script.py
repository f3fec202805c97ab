"""Script steps: what the simulated model answers, one step per model request.

A script is a JSON list of steps consumed in order by model requests of every API (Anthropic
Messages, Chat Completions, Responses); count_tokens and /v1/models never consume a step. When the
queue is empty (or no step matches) the reply is the default text ``"sim: <first 60 chars of the
last user text>"`` so an agent always gets an answer; a request that declares tools while the
queue is empty gets the small agent of ``agentic`` instead.

Step keys (all optional; unknown keys are rejected so a typo fails loudly):

- ``text``: assistant text.
- ``tool_calls``: ``[{"name": "read", "arguments": {...} | "<json text>", "id": "..."?}]``;
  several entries are parallel calls; ``text`` may accompany them. A string that is not valid
  JSON is passed through raw (to test clients against broken tool arguments).
- ``thinking``: a thinking block (Anthropic) / reasoning summary item (Responses); ignored by Chat.
- ``empty``: true → no text and no tool calls.
- ``error``: ``{"status": 429, "type": "rate_limit_error"?, "message": "..."?, "code": "..."?,
  "retry_after": seconds?}`` → an HTTP error in the provider's own JSON shape.
- ``stream_error``: same fields plus ``after_events``: HTTP 200, some content, then an in-stream
  error (Anthropic ``event: error``, Responses ``response.failed``, Chat an error data frame).
  Without streaming it is answered as a plain HTTP error.
- ``reset_after_events``: N → abort the TCP connection after N SSE events (non-streaming: after
  half the body).
- ``delay_ms``: wait before the first byte; ``chunk_delay_ms``: wait between SSE events.
- ``stop_reason``: ``"max_tokens"`` / ``"length"`` / ``"max_output_tokens"`` → a truncated answer
  in each API's terms.
- ``context_window``: this step's window; a prompt above it gets the provider's context-overflow
  error and the step stays queued (so a compacting client can retry with a shorter prompt).
- ``diagnosis_pending``: true → a request that asks for Anthropic's cache diagnosis gets
  ``{"cache_miss_reason": null}`` (the comparison still pending).
- ``match``: the step is taken only by a request whose last message text contains this string;
  steps without ``match`` take any request. The first eligible step in the queue is used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ctxscope.vocab.tokens import count_tokens

TRUNCATING_STOPS = {"max_tokens", "length", "max_output_tokens"}
NORMAL_STOPS = {"end_turn", "stop", "tool_use", "tool_calls", "completed"}


class ScriptError(ValueError):
    """A script step that does not follow the schema."""


@dataclass(frozen=True)
class ToolCallSpec:
    name: str
    arguments: str  # JSON text as the model emits it (maybe invalid on purpose); a custom tool's raw input
    id: str | None = None
    custom: bool = False  # a Responses custom tool (free-form input), answered as a custom_tool_call

    def input_object(self) -> dict[str, Any]:
        """Arguments as an object (Anthropic `input`); {} when the text is not a JSON object."""
        if self.custom:
            return {"input": self.arguments}
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ErrorSpec:
    status: int
    type: str | None = None
    message: str | None = None
    code: str | None = None
    retry_after: float | None = None
    after_events: int | None = None


@dataclass(frozen=True)
class Step:
    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    thinking: str = ""
    empty: bool = False
    error: ErrorSpec | None = None
    stream_error: ErrorSpec | None = None
    reset_after_events: int | None = None
    delay_ms: int = 0
    chunk_delay_ms: int = 0
    truncated: bool = False
    context_window: int | None = None
    match: str | None = None
    diagnosis_pending: bool = False
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    def matches(self, last_text: str) -> bool:
        return self.match is None or self.match in last_text


_KEYS = {
    "text",
    "tool_calls",
    "thinking",
    "empty",
    "error",
    "stream_error",
    "reset_after_events",
    "delay_ms",
    "chunk_delay_ms",
    "stop_reason",
    "context_window",
    "match",
    "diagnosis_pending",
}


def _int(value: Any, key: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScriptError(f"{key} must be an integer >= {minimum}")
    return value


def _str(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ScriptError(f"{key} must be a string")
    return value


def _error(value: Any, key: str, default_status: int) -> ErrorSpec:
    if not isinstance(value, dict):
        raise ScriptError(f"{key} must be an object")
    unknown = set(value) - {"status", "type", "message", "code", "retry_after", "after_events"}
    if unknown:
        raise ScriptError(f"{key}: unknown keys {sorted(unknown)}")
    status = _int(value.get("status", default_status), f"{key}.status", 100)
    retry_after = value.get("retry_after")
    if retry_after is not None and (isinstance(retry_after, bool) or not isinstance(retry_after, (int, float))):
        raise ScriptError(f"{key}.retry_after must be a number")
    after = value.get("after_events")
    return ErrorSpec(
        status=status,
        type=_str(value["type"], f"{key}.type") if value.get("type") is not None else None,
        message=_str(value["message"], f"{key}.message") if value.get("message") is not None else None,
        code=_str(value["code"], f"{key}.code") if value.get("code") is not None else None,
        retry_after=retry_after,
        after_events=_int(after, f"{key}.after_events") if after is not None else None,
    )


def _tool_call(value: Any, i: int) -> ToolCallSpec:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ScriptError(f"tool_calls[{i}] needs a string name")
    args = value.get("arguments", {})
    if isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    elif isinstance(args, str):
        text = args
    else:
        raise ScriptError(f"tool_calls[{i}].arguments must be an object or a string")
    call_id = value.get("id")
    return ToolCallSpec(value["name"], text, _str(call_id, f"tool_calls[{i}].id") if call_id is not None else None)


def parse_step(value: Any) -> Step:
    """Validate one step dict into a Step (raises ScriptError)."""
    if not isinstance(value, dict):
        raise ScriptError("a step must be a JSON object")
    unknown = set(value) - _KEYS
    if unknown:
        raise ScriptError(f"unknown step keys {sorted(unknown)}")
    calls = value.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ScriptError("tool_calls must be a list")
    stop = value.get("stop_reason")
    if stop is not None and stop not in TRUNCATING_STOPS | NORMAL_STOPS:
        raise ScriptError(f"stop_reason {stop!r} is not one of {sorted(TRUNCATING_STOPS | NORMAL_STOPS)}")
    reset = value.get("reset_after_events")
    window = value.get("context_window")
    return Step(
        text=_str(value["text"], "text") if value.get("text") is not None else None,
        tool_calls=tuple(_tool_call(c, i) for i, c in enumerate(calls)),
        thinking=_str(value.get("thinking", ""), "thinking"),
        empty=bool(value.get("empty", False)),
        error=_error(value["error"], "error", 500) if value.get("error") is not None else None,
        stream_error=(
            _error(value["stream_error"], "stream_error", 500) if value.get("stream_error") is not None else None
        ),
        reset_after_events=_int(reset, "reset_after_events") if reset is not None else None,
        delay_ms=_int(value.get("delay_ms", 0), "delay_ms"),
        chunk_delay_ms=_int(value.get("chunk_delay_ms", 0), "chunk_delay_ms"),
        truncated=stop in TRUNCATING_STOPS,
        context_window=_int(window, "context_window", 1) if window is not None else None,
        match=_str(value["match"], "match") if value.get("match") is not None else None,
        diagnosis_pending=value.get("diagnosis_pending") is True,
        raw=dict(value),
    )


def parse_script(value: Any) -> list[Step]:
    """Validate a whole script (a list of steps)."""
    if not isinstance(value, list):
        raise ScriptError("a script must be a JSON list of steps")
    steps = []
    for i, item in enumerate(value):
        try:
            steps.append(parse_step(item))
        except ScriptError as exc:
            raise ScriptError(f"step {i}: {exc}") from None
    return steps


def load_script_file(path: str) -> list[dict[str, Any]]:
    """Read and validate a JSON script file (for `ctxscope sim --script FILE`)."""
    with open(path, encoding="utf-8") as handle:
        steps = json.load(handle)
    parse_script(steps)
    return steps


_REMINDER_BLOCK = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def default_text(last_user_text: str) -> str:
    """The deterministic answer when no step applies: it echoes what the user typed, not the
    ``<system-reminder>`` blocks an agent puts in front of it."""
    snippet = " ".join(_REMINDER_BLOCK.sub(" ", last_user_text).split())[:60]
    return f"sim: {snippet}" if snippet else "sim: ok"


@dataclass(frozen=True)
class Reply:
    """The generated answer for one request, with provider-neutral fields."""

    text: str
    thinking: str
    tool_calls: tuple[ToolCallSpec, ...]
    truncated: bool

    @classmethod
    def from_step(cls, step: Step | None, last_user_text: str) -> Reply:
        if step is None:
            return cls(default_text(last_user_text), "", (), False)
        if step.empty:
            return cls("", "", (), step.truncated)
        text = step.text
        if text is None and not step.tool_calls:
            text = default_text(last_user_text)
        return cls(text or "", step.thinking, step.tool_calls, step.truncated)


def output_tokens(reply: Reply) -> int:
    """Output tokens = o200k count of the generated text, thinking and tool-call JSON."""
    total = count_tokens(reply.text) + count_tokens(reply.thinking)
    for call in reply.tool_calls:
        total += count_tokens(call.name) + count_tokens(call.arguments)
    return total
