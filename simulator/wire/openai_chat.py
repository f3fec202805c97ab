"""OpenAI Chat Completions wire format: completion objects, chunk stream, error JSON."""

from __future__ import annotations

from typing import Any

from ctxscope.simulator.model.cache import PromptCache, PromptUsage
from ctxscope.simulator.model.prompt import Block, Prompt, chat_prompt
from ctxscope.simulator.model.script import ErrorSpec
from ctxscope.simulator.wire.sse import Event, split_json, split_text
from ctxscope.simulator.wire.turn import Turn

ERROR_TYPES = {429: "requests", 401: "invalid_request_error"}
ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
DEFAULT_MESSAGES = {
    400: "Invalid request (simulated).",
    401: "Incorrect API key provided (simulated).",
    429: "Rate limit reached (simulated).",
}


def openai_error(
    status: int, type_: str | None, message: str | None, code: str | None, param: str | None
) -> dict[str, Any]:
    """OpenAI's error JSON (the same for Chat Completions and Responses)."""
    etype = type_ or ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    default = DEFAULT_MESSAGES.get(status, "The server had an error while processing your request (simulated).")
    return {
        "error": {"message": message or default, "type": etype, "param": param, "code": code or ERROR_CODES.get(status)}
    }


def openai_usage_fields(
    usage: PromptUsage, output_tokens: int, reasoning_tokens: int, *, prefix: str
) -> dict[str, Any]:
    """Inclusive usage: cached tokens are part of the prompt/input count."""
    return {
        f"{prefix}_tokens": usage.total,
        f"{prefix}_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": usage.total + output_tokens,
    }


class ChatWire:
    api = "chat"
    request_id_header = "x-request-id"
    request_id_prefix = "req_"
    response_id_prefix = "chatcmpl-"
    call_id_prefix = "call_"

    def prompt(self, body: dict[str, Any], memory: dict[str, tuple[Block, ...]]) -> tuple[Prompt, tuple[Block, ...]]:
        return chat_prompt(body), ()

    def usage(self, cache: PromptCache, scope: str, model: str, prompt: Prompt, now: float) -> PromptUsage:
        return cache.openai(scope, model, prompt.blocks, now, prompt.openai)

    def error(
        self, status: int, type_: str | None, message: str | None, code: str | None, param: str | None = None
    ) -> dict[str, Any]:
        return openai_error(status, type_, message, code, param)

    def overflow(self, tokens: int, window: int) -> dict[str, Any]:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{tokens} tokens. Please reduce the length of the messages."
        )
        return openai_error(400, "invalid_request_error", message, "context_length_exceeded", "messages")

    def wants_stream(self, body: dict[str, Any]) -> bool:
        return body.get("stream") is True

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        return None

    # ------------------------------------------------------------ shapes

    def _usage(self, turn: Turn) -> dict[str, Any]:
        u, out = turn.usage, turn.output_tokens
        return {
            "prompt_tokens": u.total,
            "completion_tokens": out,
            "total_tokens": u.total + out,
            "prompt_tokens_details": {"cached_tokens": u.cache_read, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _finish_reason(self, turn: Turn) -> str:
        if turn.reply.truncated:
            return "length"
        return "tool_calls" if turn.reply.tool_calls else "stop"

    def _envelope(self, turn: Turn, obj: str) -> dict[str, Any]:
        return {
            "id": turn.response_id,
            "object": obj,
            "created": turn.created,
            "model": turn.model,
            "service_tier": "default",
            "system_fingerprint": "fp_ctxscope_sim",
        }

    def response(self, turn: Turn) -> dict[str, Any]:
        reply = turn.reply
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text if reply.text or not reply.tool_calls else None,
            "refusal": None,
            "annotations": [],
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c, cid in zip(reply.tool_calls, turn.call_ids, strict=True)
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish_reason(turn)}
        return {**self._envelope(turn, "chat.completion"), "choices": [choice], "usage": self._usage(turn)}

    def events(self, turn: Turn) -> list[Event]:
        include_usage = bool((turn.body.get("stream_options") or {}).get("include_usage"))
        base = self._envelope(turn, "chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None, content: bool = False) -> Event:
            data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if include_usage:
                data["usage"] = None
            return Event(data, None, content)

        out = [chunk({"role": "assistant", "content": "", "refusal": None})]
        out.extend(chunk({"content": piece}, content=True) for piece in split_text(turn.reply.text))
        for index, (call, call_id) in enumerate(zip(turn.reply.tool_calls, turn.call_ids, strict=True)):
            head = {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            out.append(chunk({"tool_calls": [head]}, content=True))
            for piece in split_json(call.arguments):
                out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, content=True))
        out.append(chunk({}, self._finish_reason(turn)))
        if include_usage:
            out.append(Event({**base, "choices": [], "usage": self._usage(turn)}))
        out.append(Event("[DONE]"))
        return out

    def stream_error(self, turn: Turn, spec: ErrorSpec, position: int) -> Event:
        return Event(openai_error(spec.status, spec.type, spec.message, spec.code, None))
