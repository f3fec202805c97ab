"""Anthropic Messages over SSE: neutral history -> wire body, and the stream parser.

Cache reuse: breakpoints (``cache_control``) sit on the system prompt, the last tool and the last
block of the last message, so each request's prefix up to the previous request's end is a cache hit.
Consecutive same-role messages are merged (the API would merge them anyway); thinking blocks are
kept and replayed with their signatures.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.messages import Block, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ..core.model import (
    LENGTH,
    STOP,
    TOOL_USE,
    DeltaSink,
    ModelRequest,
    ModelResponse,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    Usage,
)
from .http import HttpModelClient, error_from_json, load_json, previous_response_id
from .sse import SSEEvent

API = "anthropic"
VERSION = "2023-06-01"
DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"  # diagnostics.previous_message_id -> diagnostics.cache_miss_reason
EPHEMERAL = {"type": "ephemeral"}
_STOPS = {"end_turn": STOP, "stop_sequence": STOP, "tool_use": TOOL_USE, "max_tokens": LENGTH}
_BAD_ID = re.compile(r"[^a-zA-Z0-9_-]")


def _blocks(m: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for b in m.content:
        if isinstance(b, TextBlock):
            if b.text:
                out.append({"type": "text", "text": b.text})
        elif isinstance(b, ThinkingBlock):
            if b.source != API:
                continue
            if b.redacted is not None:
                out.append({"type": "redacted_thinking", "data": b.redacted})
            elif b.signature:
                out.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif isinstance(b, ToolCall):
            out.append({"type": "tool_use", "id": _BAD_ID.sub("_", b.id), "name": b.name, "input": b.arguments})
        elif isinstance(b, ToolResult):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": _BAD_ID.sub("_", b.tool_call_id),
                "content": b.content or "(no output)",
            }
            if b.is_error:
                block["is_error"] = True
            out.append(block)
    return out


def wire_messages(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _blocks(m)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def build_body(request: ModelRequest, model: str, *, thinking_budget: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": request.max_output_tokens}
    if request.system:
        body["system"] = [{"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}]
    if request.tools:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in request.tools
        ]
        tools[-1]["cache_control"] = dict(EPHEMERAL)
        body["tools"] = tools
    messages = wire_messages(request.messages)
    # The last breakpoint goes on the last block before the first request-only message (a deadline
    # reminder): the next request drops that message, so a breakpoint at or after it is never read back.
    kept = next((i for i, m in enumerate(request.messages) if m.meta.get("request_only")), len(request.messages))
    anchor = messages if kept == len(request.messages) else wire_messages(request.messages[:kept])
    if anchor:
        messages[len(anchor) - 1]["content"][len(anchor[-1]["content"]) - 1]["cache_control"] = dict(EPHEMERAL)
    body["messages"] = messages
    if thinking_budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    body["stream"] = True
    return body


class AnthropicStreamParser:
    """Accumulates content blocks by index; ``message_delta`` usage overwrites ``message_start``'s."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._id: str | None = None
        self._model: str | None = None
        self._done = False

    def feed(self, event: SSEEvent, emit: DeltaSink) -> None:
        if event.event == "ping" or not event.data:
            return
        data = load_json(event.data)
        kind = data.get("type", event.event)
        if kind == "message_start":
            msg = data.get("message") or {}
            self._id, self._model = msg.get("id"), msg.get("model")
            self._usage.update(msg.get("usage") or {})
        elif kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            block["_json"] = ""
            self._blocks[int(data.get("index", len(self._blocks)))] = block
            if block.get("type") == "tool_use":
                emit(ToolCallDelta(block.get("id", ""), block.get("name", "")))
            elif block.get("type") == "text" and block.get("text"):
                emit(TextDelta(block["text"]))
        elif kind == "content_block_delta":
            self._delta(int(data.get("index", 0)), data.get("delta") or {}, emit)
        elif kind == "message_delta":
            self._stop = (data.get("delta") or {}).get("stop_reason") or self._stop
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            raise error_from_json(None, data)

    def _delta(self, index: int, delta: dict[str, Any], emit: DeltaSink) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": "", "_json": ""})
        t = delta.get("type")
        if t == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
            emit(TextDelta(delta.get("text", "")))
        elif t == "input_json_delta":
            block["_json"] += delta.get("partial_json", "")
        elif t == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            emit(ThinkingDelta(delta.get("thinking", "")))
        elif t == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")

    def finish(self) -> ModelResponse:
        if not self._done:
            raise ProviderError("stream ended before message_stop", kind="incomplete_stream", retryable=True)
        content: list[Block] = []
        for _, b in sorted(self._blocks.items()):
            t = b.get("type")
            if t == "text":
                content.append(TextBlock(b.get("text", "")))
            elif t == "thinking":
                content.append(ThinkingBlock(b.get("thinking", ""), b.get("signature") or None, source=API))
            elif t == "redacted_thinking":
                content.append(ThinkingBlock("", None, b.get("data", ""), source=API))
            elif t == "tool_use":
                content.append(_tool_call(b))
        u = self._usage
        cache_read = int(u.get("cache_read_input_tokens") or 0)
        cache_write = int(u.get("cache_creation_input_tokens") or 0)
        usage = Usage(
            int(u.get("input_tokens") or 0) + cache_read + cache_write,
            int(u.get("output_tokens") or 0),
            cache_read,
            cache_write,
            dict(u),
        )
        return ModelResponse(
            Message("assistant", tuple(content)),
            _STOPS.get(self._stop or "", self._stop or STOP),
            usage,
            self._stop,
            self._id,
            self._model,
        )


def _tool_call(b: dict[str, Any]) -> ToolCall:
    raw = b.get("_json", "")
    if not raw:
        given = b.get("input")
        args = given if isinstance(given, dict) else {}
        return ToolCall(b.get("id", ""), b.get("name", ""), args)
    try:
        args = load_json(raw)
    except ProviderError:
        return ToolCall(b.get("id", ""), b.get("name", ""), {}, raw, "arguments are not valid JSON")
    if not isinstance(args, dict):
        return ToolCall(b.get("id", ""), b.get("name", ""), {}, raw, "arguments are not a JSON object")
    return ToolCall(b.get("id", ""), b.get("name", ""), args)


class AnthropicClient(HttpModelClient):
    api = API
    path = "/v1/messages"

    def __init__(self, *, thinking_budget: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thinking_budget = thinking_budget

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body = build_body(request, self.model, thinking_budget=self.thinking_budget)
        # Ask for Anthropic's own cache diagnosis against this conversation's latest answer (null on
        # the first turn: opted in, nothing to compare); the beta header goes with it (auth_headers).
        body["diagnostics"] = {"previous_message_id": previous_response_id(request.messages, self.provider)}
        return body

    def auth_headers(self) -> dict[str, str]:
        betas = [b.strip() for b in self.extra_headers.get("anthropic-beta", "").split(",") if b.strip()]
        headers = {"anthropic-version": VERSION, "anthropic-beta": ",".join(dict.fromkeys([*betas, DIAGNOSIS_BETA]))}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def new_parser(self) -> AnthropicStreamParser:
        return AnthropicStreamParser()
