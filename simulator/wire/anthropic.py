"""Anthropic Messages wire format: message objects, SSE event sequence, error JSON."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from ctxscope.simulator.model.cache import PromptCache, PromptUsage
from ctxscope.simulator.model.prompt import Block, Prompt, anthropic_prompt
from ctxscope.simulator.model.script import ErrorSpec
from ctxscope.simulator.wire.sse import Event, split_json, split_text
from ctxscope.simulator.wire.turn import Turn

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
DEFAULT_MESSAGES = {
    "invalid_request_error": "invalid request (simulated)",
    "authentication_error": "invalid x-api-key (simulated)",
    "rate_limit_error": "rate limit reached (simulated)",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
}


def _signature(thinking: str) -> str:
    return base64.b64encode(hashlib.sha256(f"sim-thinking:{thinking}".encode()).digest() * 3).decode()


class AnthropicWire:
    api = "anthropic"
    request_id_header = "request-id"
    request_id_prefix = "req_01"
    response_id_prefix = "msg_01"
    call_id_prefix = "toolu_01"

    def prompt(self, body: dict[str, Any], memory: dict[str, tuple[Block, ...]]) -> tuple[Prompt, tuple[Block, ...]]:
        return anthropic_prompt(body), ()

    def usage(self, cache: PromptCache, scope: str, model: str, prompt: Prompt, now: float) -> PromptUsage:
        return cache.anthropic(scope, model, prompt.blocks, now)

    def error(
        self, status: int, type_: str | None, message: str | None, code: str | None, param: str | None = None
    ) -> dict[str, Any]:
        etype = type_ or ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": etype, "message": message or DEFAULT_MESSAGES.get(etype, etype)}}

    def overflow(self, tokens: int, window: int) -> dict[str, Any]:
        return self.error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {window} maximum", None)

    def wants_stream(self, body: dict[str, Any]) -> bool:
        return body.get("stream") is True

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        return None

    # ------------------------------------------------------------ shapes

    def _usage(self, turn: Turn, output_tokens: int) -> dict[str, Any]:
        u = turn.usage
        return {
            "input_tokens": u.uncached,
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": u.cache_write_5m,
                "ephemeral_1h_input_tokens": u.cache_write_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _stop_reason(self, turn: Turn) -> str:
        if turn.reply.truncated:
            return "max_tokens"
        return "tool_use" if turn.reply.tool_calls else "end_turn"

    def _blocks(self, turn: Turn) -> list[dict[str, Any]]:
        reply, blocks = turn.reply, list[dict[str, Any]]()
        if reply.thinking:
            blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": _signature(reply.thinking)})
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call, call_id in zip(reply.tool_calls, turn.call_ids, strict=True):
            blocks.append({"type": "tool_use", "id": call_id, "name": call.name, "input": call.input_object()})
        return blocks

    def _message(
        self, turn: Turn, content: list[dict[str, Any]], stop: str | None, output_tokens: int
    ) -> dict[str, Any]:
        message = {
            "id": turn.response_id,
            "type": "message",
            "role": "assistant",
            "model": turn.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(turn, output_tokens),
        }
        if turn.diagnosis.asked:  # on the message, so streamed on message_start (no later event completes it)
            message["diagnostics"] = turn.diagnosis.value
        return message

    def response(self, turn: Turn) -> dict[str, Any]:
        return self._message(turn, self._blocks(turn), self._stop_reason(turn), turn.output_tokens)

    def events(self, turn: Turn) -> list[Event]:
        def ev(name: str, content: bool = False, **data: Any) -> Event:
            return Event({"type": name, **data}, name, content)

        start = self._message(turn, [], None, min(1, turn.output_tokens))
        out = [ev("message_start", message=start)]
        calls = iter(zip(turn.reply.tool_calls, turn.call_ids, strict=True))
        for index, block in enumerate(self._blocks(turn)):
            kind = block["type"]
            if kind == "thinking":
                out.append(
                    ev(
                        "content_block_start",
                        index=index,
                        content_block={"type": "thinking", "thinking": "", "signature": ""},
                    )
                )
                deltas = [{"type": "thinking_delta", "thinking": p} for p in split_text(block["thinking"])]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "text":
                out.append(ev("content_block_start", index=index, content_block={"type": "text", "text": ""}))
                deltas = [{"type": "text_delta", "text": p} for p in split_text(block["text"])]
            else:
                call, _ = next(calls)
                start_block = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                out.append(ev("content_block_start", index=index, content_block=start_block))
                pieces = [""] + split_json(call.arguments)
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
            if index == 0:
                out.append(ev("ping"))
            out.extend(ev("content_block_delta", True, index=index, delta=d) for d in deltas)
            out.append(ev("content_block_stop", index=index))
        if len(out) == 1:
            out.append(ev("ping"))
        usage = self._usage(turn, turn.output_tokens)
        usage.pop("cache_creation")
        usage.pop("service_tier")
        out.append(
            ev("message_delta", delta={"stop_reason": self._stop_reason(turn), "stop_sequence": None}, usage=usage)
        )
        out.append(ev("message_stop"))
        return out

    def stream_error(self, turn: Turn, spec: ErrorSpec, position: int) -> Event:
        etype = spec.type or ERROR_TYPES.get(spec.status, "overloaded_error" if spec.status >= 500 else "api_error")
        return Event(self.error(spec.status, etype, spec.message, spec.code), "error")

    def count_tokens(self, prompt: Prompt) -> dict[str, Any]:
        return {"input_tokens": prompt.tokens}
