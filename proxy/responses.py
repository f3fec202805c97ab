"""Turn a recorded LLM response (JSON or SSE) into the final response object, usage and errors.

A streamed call is reassembled into the body the non-streaming API would have returned, so the
inspector reads one shape whatever the client asked for. Text deltas are kept as lists of
pieces and joined once, so long streams of tiny deltas stay linear. Recorded traffic can be
anything (truncated, misdeclared, hostile): parsing never raises, it reports what it could read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ctxscope.proxy.apis import (
    ANTHROPIC_COUNT_TOKENS,
    ANTHROPIC_MESSAGES,
    GEMINI_GENERATE,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
)
from ctxscope.proxy.sse import SSEDecoder, SSEEvent
from ctxscope.proxy.usage import Usage, normalize_usage

_SSE_FIELDS = (b"data", b"event", b"id", b"retry")
_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_SNIPPET = 2000
_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError)


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


def parse_response(
    api: str | None, status: int | None, content_type: str | None, body: bytes
) -> ParsedResponse:
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
        self._handler = _HANDLERS.get(api or "", _Generic)()
        self._events = 0
        self._malformed = 0  # events the handler could not make sense of
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
            except _MALFORMED:
                data = None
            try:
                self._handler.on(event, data)
            except _MALFORMED:
                self._malformed += 1

    def result(self) -> ParsedResponse:
        if self._result is None:
            if self._mode == "sse":
                tail = self._decoder.finish()
                self._dispatch(tail)
                if isinstance(self._handler, _Generic):
                    self._handler.clean_end = not tail
                self._result = self._stream_result(self._handler, self._events)
            elif self._mode == "json":
                self._result = self._json_result(b"".join(self._chunks))
            else:
                self._result = self._other_result(self._head + b"".join(self._chunks))
        return self._result

    def _stream_result(self, h: _Handler, events: int) -> ParsedResponse:
        try:
            body, stop = h.build()
        except _MALFORMED:
            body, stop = None, None
        error = h.error
        if error is None and self.status is not None and self.status >= 400:
            error = {"type": "http_error", "status": self.status}
        usage = normalize_usage(self.api, h.usage) if self._known else None
        return ParsedResponse(True, body, usage, error, h.complete, events, stop)

    def _json_result(self, raw: bytes) -> ParsedResponse:
        try:
            obj = json.loads(raw)
        except _MALFORMED as e:
            return self._unparseable(f"invalid JSON: {e}", raw)
        if isinstance(obj, list) and self.api == GEMINI_GENERATE:
            # streamGenerateContent without alt=sse: a JSON array of frames.
            handler = _Gemini()
            for frame in obj:
                try:
                    handler.on(SSEEvent(None, ""), frame)
                except _MALFORMED:
                    self._malformed += 1
            return self._stream_result(handler, len(obj))
        error = None
        if isinstance(obj, dict) and (obj.get("error") or obj.get("type") == "error"):
            error = _error_of(obj)
        elif isinstance(obj, list) and obj and isinstance(obj[0], dict) and obj[0].get("error"):
            error = _error_of(obj[0])
        if error is None and self.status is not None and self.status >= 400:
            error = {"type": "http_error", "status": self.status}
        if not isinstance(obj, dict):
            return ParsedResponse(False, None, None, error, True, 0, None)
        if self.api == GEMINI_GENERATE and isinstance(obj.get("response"), dict):
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
    if api == ANTHROPIC_COUNT_TOKENS:
        return obj if "input_tokens" in obj else None
    if api == GEMINI_GENERATE:
        usage = obj.get("usageMetadata")
    else:
        usage = obj.get("usage")
    return usage if isinstance(usage, dict) else None


def _json_stop_reason(api: str | None, obj: dict) -> str | None:
    if api == OPENAI_RESPONSES:
        return _responses_stop(obj)
    if api == GEMINI_GENERATE:
        return _first_field(obj.get("candidates"), "finishReason")
    if api == OPENAI_CHAT:
        return _first_field(obj.get("choices"), "finish_reason")
    stop = obj.get("stop_reason")
    return stop if isinstance(stop, str) else None


# --- shared helpers ---------------------------------------------------------------------------


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _idx(obj: dict, key: str = "index", default: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def _error_of(obj: dict) -> dict:
    """The error object inside an error body or event, in the provider's own shape."""
    error = obj.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str):
        return {"message": error}
    return {k: v for k, v in obj.items() if k not in ("type", "sequence_number")} or {"type": "error"}


def _first_field(choices: object, key: str) -> str | None:
    """``key`` of the lowest-index choice/candidate."""
    if not isinstance(choices, list):
        return None
    found = [c for c in choices if isinstance(c, dict)]
    if not found:
        return None
    value = min(found, key=lambda c: _idx(c)).get(key)
    return value if isinstance(value, str) else None


def _responses_stop(obj: dict) -> str | None:
    status = obj.get("status")
    if status == "incomplete":
        reason = _dict(obj.get("incomplete_details")).get("reason")
        return reason if isinstance(reason, str) else "incomplete"
    return status if status in ("completed", "failed", "cancelled") else None


def _joined(current: object, pieces: list[str]) -> str:
    return (current if isinstance(current, str) else "") + "".join(pieces)


class _Handler:
    """Per-API stream state. ``build`` returns (body, stop_reason) and settles ``usage``/``complete``."""

    def __init__(self) -> None:
        self.error: dict | None = None
        self.complete = False
        self.usage: dict | None = None

    def on(self, event: SSEEvent, data: object) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def build(self) -> tuple[dict | None, str | None]:  # pragma: no cover - overridden
        raise NotImplementedError


class _Generic(_Handler):
    """Unknown API: only counts events; complete when it ended on a frame boundary or [DONE]."""

    clean_end = False
    done = False

    def on(self, event: SSEEvent, data: object) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
        elif event.event == "error" and isinstance(data, dict):
            self.error = _error_of(data)

    def build(self) -> tuple[dict | None, str | None]:
        self.complete = self.done or self.clean_end
        return None, None


# --- Anthropic Messages -----------------------------------------------------------------------

_ANTHROPIC_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("partial_json", "input"),
}


class _Anthropic(_Handler):
    """message_start, content blocks by index, message_delta (usage cumulative), message_stop."""

    def __init__(self) -> None:
        super().__init__()
        self.message: dict | None = None
        self.delta: dict = {}
        self.blocks: dict[int, dict] = {}
        self.pieces: dict[tuple[int, str], list[str]] = {}

    def on(self, event: SSEEvent, data: object) -> None:
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.event
        if kind == "message_start":
            msg = _dict(data.get("message"))
            self.message = msg
            for i, block in enumerate(msg.get("content") or ()):
                if isinstance(block, dict):
                    self.blocks[i] = dict(block)
            usage = msg.get("usage")
            self.usage = dict(usage) if isinstance(usage, dict) else None
        elif kind == "content_block_start":
            self.blocks[_idx(data, default=len(self.blocks))] = dict(_dict(data.get("content_block")))
        elif kind == "content_block_delta":
            self._delta(_idx(data, default=max(self.blocks, default=0)), _dict(data.get("delta")))
        elif kind == "message_delta":
            self.delta.update(_dict(data.get("delta")))
            usage = data.get("usage")
            if isinstance(usage, dict):  # cumulative: overwrite what is reported (as the SDK does)
                merged = dict(self.usage or {})
                merged.update({k: v for k, v in usage.items() if v is not None})
                self.usage = merged
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            self.error = _error_of(data)

    def _delta(self, i: int, delta: dict) -> None:
        block = self.blocks.setdefault(i, {})
        kind = delta.get("type")
        if kind in _ANTHROPIC_DELTAS:
            source, target = _ANTHROPIC_DELTAS[kind]
            text = delta.get(source)
            if isinstance(text, str):
                self.pieces.setdefault((i, target), []).append(text)
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            if not isinstance(block.get("citations"), list):
                block["citations"] = []
            block["citations"].append(delta.get("citation"))

    def build(self) -> tuple[dict | None, str | None]:
        if self.message is None and not self.blocks and not self.delta:
            return None, None
        msg = dict(self.message or {"type": "message", "role": "assistant"})
        msg.update(self.delta)
        content = []
        for i in sorted(self.blocks):
            block = dict(self.blocks[i])
            for field in ("text", "thinking"):
                if (i, field) in self.pieces:
                    block[field] = _joined(block.get(field), self.pieces[(i, field)])
            raw = "".join(self.pieces.get((i, "input"), ()))
            if raw.strip():
                try:
                    block["input"] = json.loads(raw)
                except _MALFORMED:
                    block["input"] = raw  # cut off or invalid: keep what the model sent
            content.append(block)
        msg["content"] = content
        if self.usage is not None:
            msg["usage"] = self.usage
        stop = msg.get("stop_reason")
        return msg, stop if isinstance(stop, str) else None


# --- OpenAI Chat Completions ------------------------------------------------------------------


class _Chat(_Handler):
    """chat.completion.chunk frames merged per choice; tool_calls merged by index; [DONE]."""

    _NOT_TOP = frozenset({"choices", "usage", "object", "obfuscation"})

    def __init__(self) -> None:
        super().__init__()
        self.top: dict = {}
        self.choices: dict[int, dict] = {}
        self.done = False
        self.seen = False

    def on(self, event: SSEEvent, data: object) -> None:
        if data is None:
            if event.data.strip() == "[DONE]":
                self.done = True
            return
        if not isinstance(data, dict):
            return
        if event.event == "error" or (data.get("error") is not None and "choices" not in data):
            self.error = _error_of(data)
            return
        self.seen = True
        for k, v in data.items():
            if k not in self._NOT_TOP:
                self.top[k] = v
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: dict) -> None:
        i = _idx(choice)
        st = self.choices.get(i)
        if st is None:
            st = self.choices[i] = {"fields": {}, "text": {}, "lists": {}, "tools": {}, "logprobs": {},
                                    "extra": {}, "finish": None}
        if choice.get("finish_reason") is not None:
            st["finish"] = choice["finish_reason"]
        for k, v in _dict(choice.get("logprobs")).items():
            if isinstance(v, list):
                st["logprobs"].setdefault(k, []).extend(v)
        for k, v in choice.items():
            if k not in ("index", "delta", "finish_reason", "logprobs"):
                st["extra"][k] = v
        for k, v in _dict(choice.get("delta")).items():
            if k == "tool_calls" and isinstance(v, list):
                self._tools(st["tools"], v)
            elif k == "function_call" and isinstance(v, dict):  # legacy functions API
                self._tools(st["tools"], [{"index": -1, "function": v}])
            elif isinstance(v, str):
                if k == "role":
                    st["fields"]["role"] = v
                else:
                    st["text"].setdefault(k, []).append(v)
            elif isinstance(v, list):
                st["lists"].setdefault(k, []).extend(v)
            elif v is not None:
                st["fields"][k] = v

    @staticmethod
    def _tools(tools: dict, deltas: list) -> None:
        for tc in deltas:
            if not isinstance(tc, dict):
                continue
            i = tc.get("index")
            if not isinstance(i, int) or isinstance(i, bool):  # servers that omit the index
                known = {t["id"] for t in tools.values()}
                i = max(tools, default=-1) + 1 if tc.get("id") and tc["id"] not in known else max(tools, default=0)
            t = tools.setdefault(i, {"id": None, "type": None, "name": "", "args": []})
            if isinstance(tc.get("id"), str) and tc["id"]:
                t["id"] = tc["id"]
            if isinstance(tc.get("type"), str):
                t["type"] = tc["type"]
            fn = _dict(tc.get("function"))
            name = fn.get("name")
            if isinstance(name, str) and name != t["name"]:
                t["name"] += name  # sent once by OpenAI, repeated or split by some compatible servers
            if isinstance(fn.get("arguments"), str):
                t["args"].append(fn["arguments"])

    def build(self) -> tuple[dict | None, str | None]:
        finished = bool(self.choices) and all(st["finish"] is not None for st in self.choices.values())
        self.complete = self.done or finished
        if not self.seen:
            return None, None
        body = dict(self.top)
        body["object"] = "chat.completion"
        choices = []
        for i in sorted(self.choices):
            st = self.choices[i]
            msg: dict = {"role": "assistant", "content": None}
            msg.update(st["fields"])
            msg.update({k: "".join(parts) for k, parts in st["text"].items()})
            msg.update({k: list(items) for k, items in st["lists"].items()})
            calls = [
                {"id": t["id"], "type": t["type"] or "function",
                 "function": {"name": t["name"], "arguments": "".join(t["args"])}}
                for n, t in sorted(st["tools"].items()) if n >= 0
            ]
            if calls:
                msg["tool_calls"] = calls
            if -1 in st["tools"]:
                legacy = st["tools"][-1]
                msg["function_call"] = {"name": legacy["name"], "arguments": "".join(legacy["args"])}
            choices.append({"index": i, "message": msg, "finish_reason": st["finish"],
                            "logprobs": dict(st["logprobs"]) or None, **st["extra"]})
        body["choices"] = choices
        if self.usage is not None:
            body["usage"] = self.usage
        return body, _first_field(choices, "finish_reason")


# --- OpenAI Responses -------------------------------------------------------------------------

_RESPONSES_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_RESPONSES_SNAPSHOT = ("response.created", "response.in_progress", "response.queued")
# delta event -> (part group or None for an item field, index key, field, default part type)
_RESPONSES_DELTAS = {
    "response.output_text.delta": ("content", "content_index", "text", "output_text"),
    "response.refusal.delta": ("content", "content_index", "refusal", "refusal"),
    "response.reasoning_text.delta": ("content", "content_index", "text", "reasoning_text"),
    "response.reasoning_summary_text.delta": ("summary", "summary_index", "text", "summary_text"),
    "response.function_call_arguments.delta": (None, None, "arguments", None),
    "response.custom_tool_call_input.delta": (None, None, "input", None),
}
_RESPONSES_PARTS = {
    "response.content_part.added": ("content", "content_index"),
    "response.reasoning_summary_part.added": ("summary", "summary_index"),
}


class _Responses(_Handler):
    """The terminal event carries the whole response; items are rebuilt only for cut streams."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: dict | None = None
        self.final: dict | None = None
        self.items: dict[int, dict] = {}
        self.done: set[int] = set()
        self.parts: dict[int, dict[tuple[str, int], dict]] = {}
        self.pieces: dict[int, dict[tuple, list[str]]] = {}

    def on(self, event: SSEEvent, data: object) -> None:
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.event
        if kind in _RESPONSES_TERMINAL or kind in _RESPONSES_SNAPSHOT:
            response = data.get("response")
            if not isinstance(response, dict):
                return
            if kind in _RESPONSES_SNAPSHOT:
                self.snapshot = response
                return
            self.final, self.complete = response, True
            if kind == "response.failed":
                error = response.get("error")
                self.error = error if isinstance(error, dict) else {"message": "response failed"}
            return
        if kind == "error":
            self.error = _error_of(data)
            return
        oi = _idx(data, "output_index")
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(data.get("item"), dict):
                self.items[oi] = data["item"]
                if kind.endswith(".done"):
                    self.done.add(oi)
            return
        if oi in self.done:
            return  # the done item already holds the final text
        if kind in _RESPONSES_PARTS:
            group, index_key = _RESPONSES_PARTS[kind]
            if isinstance(data.get("part"), dict):
                self.parts.setdefault(oi, {})[(group, _idx(data, index_key))] = dict(data["part"])
        elif kind == "response.output_text.annotation.added":
            part = self.parts.setdefault(oi, {}).setdefault(
                ("content", _idx(data, "content_index")), {"type": "output_text", "text": ""})
            if not isinstance(part.get("annotations"), list):
                part["annotations"] = []
            part["annotations"].append(data.get("annotation"))
        elif kind in _RESPONSES_DELTAS and isinstance(data.get("delta"), str):
            group, index_key, field, part_type = _RESPONSES_DELTAS[kind]
            ci = _idx(data, index_key) if index_key else 0
            self.pieces.setdefault(oi, {}).setdefault((group, ci, field, part_type), []).append(data["delta"])

    def _item(self, oi: int) -> dict:
        item = dict(self.items[oi])
        if oi in self.done:
            return item
        groups: dict[str, dict[int, dict]] = {}
        for (group, ci), part in self.parts.get(oi, {}).items():
            groups.setdefault(group, {})[ci] = dict(part)
        for (group, ci, field, part_type), pieces in self.pieces.get(oi, {}).items():
            if group is None:
                item[field] = _joined(item.get(field), pieces)
            else:
                part = groups.setdefault(group, {}).setdefault(ci, {"type": part_type})
                part[field] = _joined(part.get(field), pieces)
        for group, parts in groups.items():
            merged = dict(enumerate(item.get(group) if isinstance(item.get(group), list) else ()))
            merged.update(parts)
            item[group] = [merged[ci] for ci in sorted(merged)]
        return item

    def build(self) -> tuple[dict | None, str | None]:
        if self.final is not None:
            body = self.final
            if not body.get("output") and self.items:
                body = {**body, "output": [self._item(oi) for oi in sorted(self.items)]}
        elif self.snapshot is not None or self.items:
            body = dict(self.snapshot or {"object": "response", "status": "in_progress"})
            body["output"] = [self._item(oi) for oi in sorted(self.items)]
        else:
            return None, None
        usage = body.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        return body, _responses_stop(body)


# --- Gemini generateContent -------------------------------------------------------------------


class _Gemini(_Handler):
    """Each frame is a GenerateContentResponse; text parts merge, the last usageMetadata wins."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict | None = None
        self.cands: dict[int, dict] = {}

    def on(self, event: SSEEvent, data: object) -> None:
        if not isinstance(data, dict):
            return
        if isinstance(data.get("response"), dict) and "candidates" not in data:
            data = data["response"]  # Code Assist wraps each frame
        if data.get("error"):
            self.error = _error_of(data)
            return
        self.last = data
        if isinstance(data.get("usageMetadata"), dict):
            self.usage = data["usageMetadata"]
        for pos, cand in enumerate(data.get("candidates") or ()):
            if not isinstance(cand, dict):
                continue
            st = self.cands.setdefault(_idx(cand, default=pos), {"fields": {}, "role": None, "parts": []})
            st["fields"].update({k: v for k, v in cand.items() if k != "content"})
            if cand.get("finishReason"):
                self.complete = True
            content = _dict(cand.get("content"))
            if content.get("role"):
                st["role"] = content["role"]
            for part in content.get("parts") or ():
                if isinstance(part, dict):
                    self._part(st["parts"], part)

    @staticmethod
    def _part(parts: list, part: dict) -> None:
        text = part.get("text")
        if not isinstance(text, str):
            parts.append([part, None])
            return
        prev = parts[-1] if parts else None
        plain = set(part) <= {"text", "thought"}
        if plain and prev and prev[1] is not None and bool(prev[0].get("thought")) == bool(part.get("thought")):
            prev[1].append(text)
        else:
            parts.append([part, [text]])

    def build(self) -> tuple[dict | None, str | None]:
        if self.last is None:
            return None, None
        body = {k: v for k, v in self.last.items() if k != "candidates"}
        cands = []
        for i in sorted(self.cands):
            st = self.cands[i]
            parts = [part if pieces is None else {**part, "text": "".join(pieces)} for part, pieces in st["parts"]]
            content: dict = {"parts": parts}
            if st["role"]:
                content["role"] = st["role"]
            cands.append({"content": content, **st["fields"]})
        body["candidates"] = cands
        if self.usage is not None:
            body["usageMetadata"] = self.usage
        return body, _first_field(cands, "finishReason")


_HANDLERS: dict[str, type[_Handler]] = {
    ANTHROPIC_MESSAGES: _Anthropic,
    ANTHROPIC_COUNT_TOKENS: _Anthropic,
    OPENAI_CHAT: _Chat,
    OPENAI_RESPONSES: _Responses,
    GEMINI_GENERATE: _Gemini,
}
