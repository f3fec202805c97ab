"""Gemini generateContent wire format: the request's prompt, responses, both stream forms, errors.

The model is named in the path (``/v1beta/models/{model}:generateContent``), so the app passes it
in the body's ``model`` key. ``streamGenerateContent`` answers with SSE frames when the query has
``alt=sse`` and otherwise with one JSON array whose elements are the same frames. Implicit caching
is modelled like OpenAI's automatic prefix caching; usage is inclusive (``cachedContentTokenCount``
is part of ``promptTokenCount``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ctxscope.simulator.model.cache import PromptCache, PromptUsage
from ctxscope.simulator.model.prompt import IMAGE_TOKENS, Block, Prompt, PromptError, canonical
from ctxscope.simulator.model.script import ErrorSpec
from ctxscope.simulator.wire.sse import Event, split_text
from ctxscope.simulator.wire.turn import Turn

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class ArrayFrame(Event):
    """One element of the JSON-array stream form: ``[`` before the first, ``,`` before the others."""

    first: bool = False

    def encode(self) -> bytes:
        if self.data is None:
            return b"]"
        return (b"[" if self.first else b",\r\n") + json.dumps(self.data, ensure_ascii=False).encode()


def _part_blocks(part: Any, head: str) -> tuple[Block, str]:
    """A part's block and its text (what a script step's ``match`` sees)."""
    if not isinstance(part, dict):
        raise PromptError("Invalid JSON payload: each part must be an object.")
    if isinstance(part.get("text"), str):
        return Block(f"{head}|text", part["text"]), part["text"]
    call = part.get("functionCall") or part.get("function_call")
    if isinstance(call, dict):
        return Block(f"{head}|call|{call.get('name')}", canonical(call.get("args") or {})), ""
    result = part.get("functionResponse") or part.get("function_response")
    if isinstance(result, dict):
        return Block(f"{head}|result|{result.get('name')}", canonical(result.get("response"))), ""
    if any(k in part for k in ("inlineData", "inline_data", "fileData", "file_data")):
        digest = hashlib.sha256(canonical(part).encode()).hexdigest()[:16]
        return Block(f"{head}|media|{digest}", "", None, IMAGE_TOKENS), ""
    return Block(f"{head}|other", canonical(part)), ""


def gemini_prompt(body: dict[str, Any]) -> Prompt:
    """Tools, then systemInstruction, then contents: the order the prefix is cached in."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise PromptError("* GenerateContentRequest.contents: contents is not specified")
    blocks = [Block("tool", canonical(t)) for t in body.get("tools") or []]
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, dict):
        blocks.extend(_part_blocks(p, "system")[0] for p in system.get("parts") or [])
    last_text = last_user = ""
    for content in contents:
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise PromptError("Invalid JSON payload: each content must be an object with parts.")
        role = content.get("role") or "user"
        texts = []
        for part in content["parts"]:
            block, text = _part_blocks(part, f"content:{role}")
            blocks.append(block)
            texts.append(text)
        last_text = "".join(texts)
        if role == "user" and last_text.strip():
            last_user = last_text
    return Prompt(tuple(blocks), last_text, last_user)


class GeminiWire:
    """``stream``: None (generateContent), "sse" or "array" (streamGenerateContent)."""

    api = "gemini"
    request_id_header = "x-goog-request-id"
    request_id_prefix = ""
    response_id_prefix = ""
    call_id_prefix = "gcall_"

    def __init__(self, stream: str | None = None):
        self.stream = stream
        self.stream_content_type = "text/event-stream" if stream == "sse" else "application/json; charset=UTF-8"

    def prompt(self, body: dict[str, Any], memory: dict[str, tuple[Block, ...]]) -> tuple[Prompt, tuple[Block, ...]]:
        return gemini_prompt(body), ()

    def usage(self, cache: PromptCache, scope: str, model: str, prompt: Prompt, now: float) -> PromptUsage:
        return cache.openai(scope, "gemini:" + model, prompt.blocks, now)

    def error(
        self, status: int, type_: str | None, message: str | None, code: str | None, param: str | None = None
    ) -> dict[str, Any]:
        name = STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        return {"error": {"code": status, "message": message or f"Simulated {name}.", "status": name}}

    def overflow(self, tokens: int, window: int) -> dict[str, Any]:
        message = f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window})."
        return self.error(400, None, message, None)

    def wants_stream(self, body: dict[str, Any]) -> bool:
        return self.stream is not None

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        return None

    # ------------------------------------------------------------ shapes

    def _usage(self, turn: Turn) -> dict[str, Any]:
        u, out = turn.usage, turn.output_tokens
        usage: dict[str, Any] = {
            "promptTokenCount": u.total,
            "candidatesTokenCount": out,
            "totalTokenCount": u.total + out,
        }
        if u.cache_read:
            usage["cachedContentTokenCount"] = u.cache_read
        return usage

    def _finish(self, turn: Turn) -> str:
        return "MAX_TOKENS" if turn.reply.truncated else "STOP"

    def _calls(self, turn: Turn) -> list[dict[str, Any]]:
        return [{"functionCall": {"name": c.name, "args": c.input_object()}} for c in turn.reply.tool_calls]

    def _frame(self, turn: Turn, parts: list[dict[str, Any]], finish: bool) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            cand["finishReason"] = self._finish(turn)
        frame: dict[str, Any] = {"candidates": [cand], "modelVersion": turn.model, "responseId": turn.response_id}
        frame["usageMetadata"] = self._usage(turn) if finish else {"promptTokenCount": turn.usage.total}
        return frame

    def response(self, turn: Turn) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": turn.reply.text}] if turn.reply.text else []
        return self._frame(turn, parts + self._calls(turn), True)

    def events(self, turn: Turn) -> list[Event]:
        pieces = split_text(turn.reply.text) or [""]
        frames = [self._frame(turn, [{"text": p}], False) for p in pieces[:-1]]
        last = ([{"text": pieces[-1]}] if pieces[-1] else []) + self._calls(turn)
        frames.append(self._frame(turn, last, True))
        if self.stream == "sse":
            return [Event(f, None, True) for f in frames]
        out: list[Event] = [ArrayFrame(f, None, True, first=i == 0) for i, f in enumerate(frames)]
        return [*out, ArrayFrame(None)]

    def stream_error(self, turn: Turn, spec: ErrorSpec, position: int) -> Event:
        payload = self.error(spec.status, spec.type, spec.message, spec.code)
        return Event(payload) if self.stream == "sse" else ArrayFrame(payload, first=position == 0)
