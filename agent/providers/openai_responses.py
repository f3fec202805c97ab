"""OpenAI Responses over SSE, stateless (``store: false``): the whole history is sent as ``input`` items.

The final answer is read from ``response.output_item.done`` items (complete by definition); deltas
only feed the live display. Terminal events: ``response.completed`` / ``response.incomplete``;
``response.failed`` and ``error`` raise.
"""

from __future__ import annotations

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
)
from .http import HttpModelClient, error_from_json, load_json, previous_response_id
from .openai_chat import arguments_text, parse_call
from .sse import SSEEvent

API = "openai-responses"


def wire_input(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "user":
            items.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            if m.text:
                items.append({"role": "assistant", "content": m.text})
            for c in m.tool_calls:
                items.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": arguments_text(c)})
        else:
            for r in m.tool_results:
                items.append(
                    {"type": "function_call_output", "call_id": r.tool_call_id, "output": r.content or "(no output)"}
                )
    return items


def build_body(request: ModelRequest, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if request.system:
        body["instructions"] = request.system
    body["input"] = wire_input(request.messages)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
                "strict": False,
            }
            for t in request.tools
        ]
    body["max_output_tokens"] = request.max_output_tokens
    body["store"] = False
    body["stream"] = True
    return body


class ResponsesStreamParser:
    def __init__(self) -> None:
        self._items: dict[int, dict[str, Any]] = {}
        self._text: dict[int, str] = {}
        self._args: dict[int, str] = {}
        self._reasoning: dict[int, str] = {}
        self._response: dict[str, Any] | None = None
        self._status: str | None = None

    def feed(self, event: SSEEvent, emit: DeltaSink) -> None:
        if not event.data:
            return
        data = load_json(event.data)
        kind = data.get("type", event.event)
        idx = int(data.get("output_index", 0) or 0)
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            self._items[idx] = item
            if item.get("type") == "function_call":
                emit(ToolCallDelta(item.get("call_id", ""), item.get("name", "")))
        elif kind == "response.output_item.done":
            self._items[idx] = data.get("item") or self._items.get(idx, {})
        elif kind == "response.output_text.delta":
            self._text[idx] = self._text.get(idx, "") + data.get("delta", "")
            emit(TextDelta(data.get("delta", "")))
        elif kind == "response.function_call_arguments.delta":
            self._args[idx] = self._args.get(idx, "") + data.get("delta", "")
        elif kind == "response.function_call_arguments.done":
            self._args[idx] = data.get("arguments", self._args.get(idx, ""))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._reasoning[idx] = self._reasoning.get(idx, "") + data.get("delta", "")
            emit(ThinkingDelta(data.get("delta", "")))
        elif kind in ("response.completed", "response.incomplete"):
            self._response = data.get("response") or {}
            self._status = kind.split(".", 1)[1]
        elif kind == "response.failed":
            resp = data.get("response") or {}
            raise error_from_json(None, {"error": resp.get("error") or {"message": "response failed"}})
        elif kind == "error":
            raise error_from_json(None, data)

    def finish(self) -> ModelResponse:
        if self._response is None:
            raise ProviderError("stream ended before response.completed", kind="incomplete_stream", retryable=True)
        content: list[Block] = []
        for idx in sorted(set(self._items) | set(self._text) | set(self._args)):
            content.extend(self._blocks(idx, self._items.get(idx, {})))
        resp = self._response
        calls = any(isinstance(b, ToolCall) for b in content)
        reason = (resp.get("incomplete_details") or {}).get("reason") if self._status == "incomplete" else None
        stop = TOOL_USE if calls else (LENGTH if reason == "max_output_tokens" else (reason or STOP))
        usage = None
        if resp.get("usage"):
            u = resp["usage"]
            details = u.get("input_tokens_details") or {}
            usage = Usage(
                int(u.get("input_tokens") or 0),
                int(u.get("output_tokens") or 0),
                int(details.get("cached_tokens") or 0),
                int(details.get("cache_write_tokens") or 0),
                dict(u),
            )
        return ModelResponse(
            Message("assistant", tuple(content)), stop, usage, reason or self._status, resp.get("id"), resp.get("model")
        )

    def _blocks(self, idx: int, item: dict[str, Any]) -> list[Block]:
        t = item.get("type")
        if t == "function_call":
            arguments = item.get("arguments")
            raw = arguments if arguments is not None else self._args.get(idx, "")
            return [parse_call(item.get("call_id") or item.get("id") or f"call_{idx}", item.get("name", ""), raw)]
        if t == "reasoning":
            summary = "".join(s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict))
            text = summary or self._reasoning.get(idx, "")
            return [ThinkingBlock(text, source=API)] if text else []
        if t == "message" or idx in self._text:
            parts = [
                p.get("text", "")
                for p in item.get("content") or []
                if isinstance(p, dict) and p.get("type") == "output_text"
            ]
            text = "".join(parts) if parts else self._text.get(idx, "")
            return [TextBlock(text)] if text else []
        return []


class OpenAIResponsesClient(HttpModelClient):
    api = API
    path = "/responses"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body = build_body(request, self.model)
        # Ask for OpenAI's prompt cache diagnosis against this conversation's latest answer.
        previous = previous_response_id(request.messages, self.provider)
        if previous is not None:
            body["prompt_cache_options"] = {"comparison_response_id": previous}
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_parser(self) -> ResponsesStreamParser:
        return ResponsesStreamParser()
