"""Turn a recorded LLM response (JSON or SSE) into the final response object, usage and errors.

A streamed call is reassembled into the body the non-streaming API would have returned, so the
inspector reads one shape whatever the client asked for. Text deltas are kept as lists of
pieces and joined once, so long streams of tiny deltas stay linear. Recorded traffic can be
anything (truncated, misdeclared, hostile): parsing never raises, it reports what it could read.

Here: telling JSON from SSE, feeding events to the API's handler, and the result. The handlers,
one per API family, are in reassemble_anthropic.py, reassemble_openai.py and reassemble_gemini.py
(their shared interface in reassemble.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ctxscope.proxy.wire.reassemble import MALFORMED, GenericStream, StreamHandler, error_of, first_field
from ctxscope.proxy.wire.reassemble_anthropic import AnthropicStream
from ctxscope.proxy.wire.reassemble_gemini import GeminiStream
from ctxscope.proxy.wire.reassemble_openai import ChatStream, ResponsesStream, responses_stop
from ctxscope.proxy.wire.sse import SSEDecoder, SSEEvent
from ctxscope.proxy.wire.usage import Usage, normalize_usage
from ctxscope.vocab.apis import Api

_SSE_FIELDS = (b"data", b"event", b"id", b"retry")
_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_SNIPPET = 2000


@dataclass(frozen=True)
class ParsedResponse:
    """What a response said, as far as it could be read."""

    stream: bool
    body: dict | None  # final response object, as the non-streaming API returns it
    usage: Usage | None  # None: not reported (never 0 by default)
    error: dict | None  # provider error object (HTTP error body or in-stream error)
    complete: bool  # terminal event seen (streams) / whole JSON body parsed
    event_count: int  # SSE events dispatched (0 for JSON)
    stop_reason: str | None


def parse_response(api: str | None, status: int | None, content_type: str | None, body: bytes) -> ParsedResponse:
    """Parse a whole, already content-decoded response body."""
    acc = StreamAccumulator(api, status=status, content_type=content_type)
    acc.feed(body)
    return acc.result()


def _sniff(head: bytes) -> str | None:
    """'sse', 'json', 'other', or None while too few bytes are known. ``head`` is stripped."""
    if not head:
        return None
    if head[:1] in (b"{", b"["):
        return "json"
    if head[:1] == b":":
        return "sse"
    for name in _SSE_FIELDS:
        if head.startswith(name):
            rest = head[len(name) : len(name) + 1]
            if not rest:
                return None
            if rest in (b":", b"\r", b"\n"):
                return "sse"
        elif name.startswith(head):
            return None
    return "other"


class StreamAccumulator:
    """Feed response bytes as they arrive; ``result()`` at any time gives what they say.

    The body kind is taken from ``content_type`` when it says text/event-stream, else sniffed
    from the first bytes (SSE field, JSON, or other). ``result()`` treats the bytes seen so far
    as the end of the stream (it flushes an event that lacks its closing blank line).
    """

    def __init__(self, api: str | None, status: int | None = None, content_type: str | None = None):
        self.api = api
        self.status = status
        sse = (content_type or "").strip().lower().startswith("text/event-stream")
        self._mode: str | None = "sse" if sse else None
        self._started = False  # past a possible leading BOM
        self._head = b""  # stripped leading bytes while the body kind is unknown
        self._chunks: list[bytes] = []  # JSON body, or the start of an "other" body
        self._size = 0
        self._decoder = SSEDecoder()
        self._known = api in _HANDLERS
        self._handler = _HANDLERS.get(api or "", GenericStream)()
        self._events = 0
        self._result: ParsedResponse | None = None

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._result = None
        if self._mode is None:
            head = self._head + bytes(chunk)
            if not self._started:
                if _BOM.startswith(head):
                    self._head = head
                    return
                self._started = True
                if head.startswith(_BOM):
                    head = head[len(_BOM) :]
            head = head.lstrip(_WHITESPACE)
            mode = _sniff(head)
            if mode is None:
                self._head = head
                return
            self._mode, self._head, chunk = mode, b"", head
        if self._mode == "sse":
            self._dispatch(self._decoder.feed(chunk))
        elif self._mode == "json" or self._size < _SNIPPET:
            self._chunks.append(bytes(chunk))
            self._size += len(chunk)

    def _dispatch(self, events: list[SSEEvent]) -> None:
        for event in events:
            self._events += 1
            try:
                data = json.loads(event.data) if event.data.lstrip()[:1] in ("{", "[") else None
            except MALFORMED:
                data = None
            try:
                self._handler.on(event, data)
            except MALFORMED:
                continue  # an event the handler cannot make sense of is skipped

    def result(self) -> ParsedResponse:
        if self._result is None:
            if self._mode == "sse":
                tail = self._decoder.finish()
                self._dispatch(tail)
                if isinstance(self._handler, GenericStream):
                    self._handler.clean_end = not tail
                self._result = self._stream_result(self._handler, self._events)
            elif self._mode == "json":
                self._result = self._json_result(b"".join(self._chunks))
            else:
                self._result = self._other_result(self._head + b"".join(self._chunks))
        return self._result

    def _stream_result(self, h: StreamHandler, events: int) -> ParsedResponse:
        try:
            body, stop = h.build()
        except MALFORMED:
            body, stop = None, None
        error = h.error
        if error is None and self.status is not None and self.status >= 400:
            error = {"type": "http_error", "status": self.status}
        usage = normalize_usage(self.api, h.usage) if self._known else None
        return ParsedResponse(True, body, usage, error, h.complete, events, stop)

    def _json_result(self, raw: bytes) -> ParsedResponse:
        try:
            obj = json.loads(raw)
        except MALFORMED as e:
            return self._unparseable(f"invalid JSON: {e}", raw)
        if isinstance(obj, list) and self.api == Api.GEMINI_GENERATE:
            # streamGenerateContent without alt=sse: a JSON array of frames.
            handler = GeminiStream()
            for frame in obj:
                try:
                    handler.on(SSEEvent(None, ""), frame)
                except MALFORMED:
                    continue  # a frame the handler cannot make sense of is skipped
            return self._stream_result(handler, len(obj))
        error = None
        if isinstance(obj, dict) and (obj.get("error") or obj.get("type") == "error"):
            error = error_of(obj)
        elif isinstance(obj, list) and obj and isinstance(obj[0], dict) and obj[0].get("error"):
            error = error_of(obj[0])
        if error is None and self.status is not None and self.status >= 400:
            error = {"type": "http_error", "status": self.status}
        if not isinstance(obj, dict):
            return ParsedResponse(False, None, None, error, True, 0, None)
        if self.api == Api.GEMINI_GENERATE and isinstance(obj.get("response"), dict):
            obj = obj["response"]  # Code Assist wraps the response
        if not self._known:
            return ParsedResponse(False, obj, None, error, True, 0, None)
        usage = normalize_usage(self.api, _json_usage(self.api, obj))
        return ParsedResponse(False, obj, usage, error, True, 0, _json_stop_reason(self.api, obj))

    def _other_result(self, raw: bytes) -> ParsedResponse:
        if self.status is not None and self.status >= 400:
            error = {"type": "http_error", "status": self.status, "message": _text(raw)}
            return ParsedResponse(False, None, None, error, True, 0, None)
        if not self._known:
            return ParsedResponse(False, None, None, None, True, 0, None)
        return self._unparseable("empty body" if not raw else "body is neither JSON nor SSE", raw)

    def _unparseable(self, message: str, raw: bytes) -> ParsedResponse:
        error = {"type": "unparseable", "message": message, "status": self.status, "body": _text(raw)}
        return ParsedResponse(False, None, None, error, False, 0, None)


def _text(raw: bytes) -> str:
    return raw[:_SNIPPET].decode("utf-8", "replace")


def _json_usage(api: str | None, obj: dict) -> dict | None:
    if api == Api.ANTHROPIC_COUNT_TOKENS:
        return obj if "input_tokens" in obj else None
    usage = obj.get("usageMetadata") if api == Api.GEMINI_GENERATE else obj.get("usage")
    return usage if isinstance(usage, dict) else None


def _json_stop_reason(api: str | None, obj: dict) -> str | None:
    if api == Api.OPENAI_RESPONSES:
        return responses_stop(obj)
    if api == Api.GEMINI_GENERATE:
        return first_field(obj.get("candidates"), "finishReason")
    if api == Api.OPENAI_CHAT:
        return first_field(obj.get("choices"), "finish_reason")
    stop = obj.get("stop_reason")
    return stop if isinstance(stop, str) else None


_HANDLERS: dict[str, type[StreamHandler]] = {
    Api.ANTHROPIC_MESSAGES: AnthropicStream,
    Api.ANTHROPIC_COUNT_TOKENS: AnthropicStream,
    Api.OPENAI_CHAT: ChatStream,
    Api.OPENAI_RESPONSES: ResponsesStream,
    Api.GEMINI_GENERATE: GeminiStream,
}
