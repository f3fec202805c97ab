"""OpenAI Chat Completions over SSE (also any OpenAI-compatible server: vLLM, OpenRouter, the simulator).

Usage arrives only because we ask for it (``stream_options.include_usage``), in a last chunk with
empty ``choices``. Tool-call arguments are replayed as the exact text the model produced.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.messages import Block, Message, TextBlock, ThinkingBlock, ToolCall
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
    dumps,
)
from .http import HttpModelClient, error_from_json, load_json
from .sse import SSEEvent

API = "openai-chat"
_STOPS = {"stop": STOP, "tool_calls": TOOL_USE, "function_call": TOOL_USE, "length": LENGTH}


def arguments_text(call: ToolCall) -> str:
    return call.raw_arguments if call.raw_arguments is not None else dumps(call.arguments).decode()


def wire_messages(system: str, messages: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            calls = m.tool_calls
            text = m.text
            if not calls and not text:
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments_text(c)}}
                    for c in calls
                ]
            out.append(msg)
        else:
            for r in m.tool_results:
                out.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content or "(no output)"})
    return out


def build_body(request: ModelRequest, model: str, *, max_tokens_field: str = "max_completion_tokens") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": wire_messages(request.system, request.messages)}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            }
            for t in request.tools
        ]
    body[max_tokens_field] = request.max_output_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


class ChatStreamParser:
    def __init__(self) -> None:
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._id: str | None = None
        self._model: str | None = None
        self._done = False

    def feed(self, event: SSEEvent, emit: DeltaSink) -> None:
        if event.data.strip() == "[DONE]":
            self._done = True
            return
        if not event.data:
            return
        data = load_json(event.data)
        if not isinstance(data, dict):
            return
        if "error" in data and not data.get("choices"):
            raise error_from_json(None, data)
        self._id = data.get("id") or self._id
        self._model = data.get("model") or self._model
        if data.get("usage"):
            self._usage = data["usage"]
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._text.append(delta["content"])
                emit(TextDelta(delta["content"]))
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._thinking.append(reasoning)
                emit(ThinkingDelta(reasoning))
            for tc in delta.get("tool_calls") or []:
                self._tool_delta(tc, emit)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def _tool_delta(self, tc: dict[str, Any], emit: DeltaSink) -> None:
        idx = int(tc.get("index", len(self._calls)))
        slot = self._calls.get(idx)
        fn = tc.get("function") or {}
        if slot is None:
            slot = self._calls[idx] = {"id": tc.get("id") or "", "name": fn.get("name") or "", "arguments": ""}
            emit(ToolCallDelta(slot["id"], slot["name"]))
        else:
            slot["id"] = slot["id"] or tc.get("id") or ""
            slot["name"] = slot["name"] or fn.get("name") or ""
        slot["arguments"] += fn.get("arguments") or ""

    def finish(self) -> ModelResponse:
        if not self._done and self._finish is None:
            raise ProviderError("stream ended before a finish_reason", kind="incomplete_stream", retryable=True)
        content: list[Block] = []
        if self._thinking:
            content.append(ThinkingBlock("".join(self._thinking), source=API))
        if self._text:
            content.append(TextBlock("".join(self._text)))
        for i, slot in sorted(self._calls.items()):
            content.append(parse_call(slot["id"] or f"call_{i}", slot["name"], slot["arguments"]))
        usage = None
        if self._usage:
            u = self._usage
            details = u.get("prompt_tokens_details") or {}
            usage = Usage(
                int(u.get("prompt_tokens") or 0),
                int(u.get("completion_tokens") or 0),
                int(details.get("cached_tokens") or 0),
                int(u.get("cache_write_tokens") or details.get("cache_write_tokens") or 0),
                dict(u),
            )
        stop = _STOPS.get(self._finish or "", self._finish or STOP)
        if any(isinstance(b, ToolCall) for b in content) and stop == STOP:
            stop = TOOL_USE
        return ModelResponse(Message("assistant", tuple(content)), stop, usage, self._finish, self._id, self._model)


def parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    """A tool call from the model's argument text; broken JSON is kept and flagged, never fatal."""
    if not raw.strip():
        return ToolCall(call_id, name, {})
    try:
        args = json.loads(raw)
    except ValueError:
        return ToolCall(call_id, name, {}, raw, "arguments are not valid JSON")
    if not isinstance(args, dict):
        return ToolCall(call_id, name, {}, raw, "arguments are not a JSON object")
    return ToolCall(call_id, name, args, raw)


class OpenAIChatClient(HttpModelClient):
    api = API
    path = "/chat/completions"

    def __init__(self, *, max_tokens_field: str = "max_completion_tokens", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_tokens_field = max_tokens_field

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(request, self.model, max_tokens_field=self.max_tokens_field)

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_parser(self) -> ChatStreamParser:
        return ChatStreamParser()
