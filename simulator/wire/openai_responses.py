"""OpenAI Responses wire format: response objects, typed SSE events with sequence numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxscope.simulator.model.cache import PromptCache, PromptUsage
from ctxscope.simulator.model.diagnosis import responses_cache_options
from ctxscope.simulator.model.prompt import Block, Prompt, PromptError, responses_item_blocks, responses_prompt
from ctxscope.simulator.model.script import ErrorSpec
from ctxscope.simulator.wire.openai_chat import openai_error, openai_usage_fields
from ctxscope.simulator.wire.sse import Event, split_json, split_text
from ctxscope.simulator.wire.turn import Turn
from ctxscope.vocab.tokens import count_tokens


class PreviousResponseNotFound(PromptError):
    """previous_response_id names a response this simulator never produced (or forgot on reset)."""

    code = "previous_response_not_found"


class ResponsesWire:
    api = "responses"
    request_id_header = "x-request-id"
    request_id_prefix = "req_"
    response_id_prefix = "resp_"
    call_id_prefix = "call_"

    def prompt(self, body: dict[str, Any], memory: dict[str, tuple[Block, ...]]) -> tuple[Prompt, tuple[Block, ...]]:
        previous_id = body.get("previous_response_id")
        previous: tuple[Block, ...] = ()
        if previous_id is not None:
            if previous_id not in memory:
                raise PreviousResponseNotFound(f"Previous response with id '{previous_id}' not found.")
            previous = memory[previous_id]
        return responses_prompt(body, previous)

    def usage(self, cache: PromptCache, scope: str, model: str, prompt: Prompt, now: float) -> PromptUsage:
        return cache.openai(scope, model, prompt.blocks, now, prompt.openai)

    def error(
        self, status: int, type_: str | None, message: str | None, code: str | None, param: str | None = None
    ) -> dict[str, Any]:
        return openai_error(status, type_, message, code, param)

    def overflow(self, tokens: int, window: int) -> dict[str, Any]:
        message = "Your input exceeds the context window of this model. Please adjust your input and try again."
        return openai_error(400, "invalid_request_error", message, "context_length_exceeded", "input")

    def wants_stream(self, body: dict[str, Any]) -> bool:
        return body.get("stream") is True

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        blocks = list(turn.conversation)
        for item in self._items(turn, lambda prefix: "unused"):  # item ids never enter the blocks
            blocks.extend(responses_item_blocks(item))
        return tuple(blocks)

    # ------------------------------------------------------------ shapes

    def _items(self, turn: Turn, make_id: Callable[[str], str]) -> list[dict[str, Any]]:
        reply, items = turn.reply, []
        status = "incomplete" if reply.truncated else "completed"
        if reply.thinking:
            items.append(
                {
                    "id": make_id("rs_"),
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": reply.thinking}],
                }
            )
        if reply.text:
            part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            items.append(
                {"id": make_id("msg_"), "type": "message", "status": status, "role": "assistant", "content": [part]}
            )
        for call, call_id in zip(reply.tool_calls, turn.call_ids, strict=True):
            if call.custom:
                items.append(
                    {
                        "id": make_id("ctc_"),
                        "type": "custom_tool_call",
                        "status": "completed",
                        "call_id": call_id,
                        "name": call.name,
                        "input": call.arguments,
                    }
                )
                continue
            items.append(
                {
                    "id": make_id("fc_"),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": call.arguments,
                    "call_id": call_id,
                    "name": call.name,
                }
            )
        return items

    def _usage(self, turn: Turn) -> dict[str, Any]:
        reasoning = count_tokens(turn.reply.thinking)
        return openai_usage_fields(turn.usage, turn.output_tokens, reasoning, prefix="input")

    def _response(
        self, turn: Turn, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        body = turn.body
        text_cfg = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
        diagnosis = {}
        if turn.diagnosis.asked:
            diagnosis = {
                "prompt_cache_options": responses_cache_options(body),
                "prompt_cache_diagnostics": turn.diagnosis.value,
            }
        return {
            **diagnosis,
            "id": turn.response_id,
            "object": "response",
            "created_at": turn.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": turn.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": text_cfg,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def _final_status(self, turn: Turn) -> str:
        return "incomplete" if turn.reply.truncated else "completed"

    def response(self, turn: Turn) -> dict[str, Any]:
        return self._response(turn, self._final_status(turn), self._items(turn, turn.ids.make), self._usage(turn))

    def events(self, turn: Turn) -> list[Event]:
        out: list[Event] = []

        def ev(kind: str, content: bool = False, **data: Any) -> None:
            out.append(Event({"type": kind, "sequence_number": len(out), **data}, kind, content))

        items = self._items(turn, turn.ids.make)
        ev("response.created", response=self._response(turn, "in_progress", [], None))
        ev("response.in_progress", response=self._response(turn, "in_progress", [], None))
        for index, item in enumerate(items):
            ref = {"item_id": item["id"], "output_index": index}
            if item["type"] == "reasoning":
                ev("response.output_item.added", output_index=index, item={**item, "summary": []})
                text = item["summary"][0]["text"]
                ev(
                    "response.reasoning_summary_part.added",
                    **ref,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in split_text(text):
                    ev("response.reasoning_summary_text.delta", True, **ref, summary_index=0, delta=piece)
                ev("response.reasoning_summary_text.done", **ref, summary_index=0, text=text)
                ev(
                    "response.reasoning_summary_part.done",
                    **ref,
                    summary_index=0,
                    part={"type": "summary_text", "text": text},
                )
            elif item["type"] == "message":
                part = item["content"][0]
                ev(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                ev("response.content_part.added", **ref, content_index=0, part={**part, "text": ""})
                for piece in split_text(part["text"]):
                    ev("response.output_text.delta", True, **ref, content_index=0, delta=piece, logprobs=[])
                ev("response.output_text.done", **ref, content_index=0, text=part["text"], logprobs=[])
                ev("response.content_part.done", **ref, content_index=0, part=part)
            elif item["type"] == "custom_tool_call":
                ev(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "input": ""},
                )
                for piece in split_text(item["input"]):
                    ev("response.custom_tool_call_input.delta", True, **ref, delta=piece)
                ev("response.custom_tool_call_input.done", **ref, input=item["input"])
            else:
                ev(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in split_json(item["arguments"]):
                    ev("response.function_call_arguments.delta", True, **ref, delta=piece)
                ev("response.function_call_arguments.done", **ref, name=item["name"], arguments=item["arguments"])
            ev("response.output_item.done", output_index=index, item=item)
        status = self._final_status(turn)
        ev(f"response.{status}", response=self._response(turn, status, items, self._usage(turn)))
        return out

    def stream_error(self, turn: Turn, spec: ErrorSpec, position: int) -> Event:
        failed = self._response(turn, "failed", [], self._usage(turn))
        failed["error"] = {
            "code": spec.code or ("rate_limit_exceeded" if spec.status == 429 else "server_error"),
            "message": spec.message or "The model failed to generate a response (simulated).",
        }
        return Event({"type": "response.failed", "sequence_number": position, "response": failed}, "response.failed")
