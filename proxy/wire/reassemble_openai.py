"""OpenAI streams reassembled: Chat Completions chunks into a chat.completion, Responses events
into the response object (the terminal event carries it whole; cut streams are rebuilt from items)."""

from __future__ import annotations

from ctxscope.proxy.wire.reassemble import StreamHandler, as_dict, error_of, first_field, index_of, joined
from ctxscope.proxy.wire.sse import SSEEvent


def responses_stop(obj: dict) -> str | None:
    status = obj.get("status")
    if status == "incomplete":
        reason = as_dict(obj.get("incomplete_details")).get("reason")
        return reason if isinstance(reason, str) else "incomplete"
    return status if status in ("completed", "failed", "cancelled") else None


class ChatStream(StreamHandler):
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
            self.error = error_of(data)
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
        i = index_of(choice)
        st = self.choices.get(i)
        if st is None:
            st = self.choices[i] = {
                "fields": {},
                "text": {},
                "lists": {},
                "tools": {},
                "logprobs": {},
                "extra": {},
                "finish": None,
            }
        if choice.get("finish_reason") is not None:
            st["finish"] = choice["finish_reason"]
        for k, v in as_dict(choice.get("logprobs")).items():
            if isinstance(v, list):
                st["logprobs"].setdefault(k, []).extend(v)
        for k, v in choice.items():
            if k not in ("index", "delta", "finish_reason", "logprobs"):
                st["extra"][k] = v
        for k, v in as_dict(choice.get("delta")).items():
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
            fn = as_dict(tc.get("function"))
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
                {
                    "id": t["id"],
                    "type": t["type"] or "function",
                    "function": {"name": t["name"], "arguments": "".join(t["args"])},
                }
                for n, t in sorted(st["tools"].items())
                if n >= 0
            ]
            if calls:
                msg["tool_calls"] = calls
            if -1 in st["tools"]:
                legacy = st["tools"][-1]
                msg["function_call"] = {"name": legacy["name"], "arguments": "".join(legacy["args"])}
            choices.append(
                {
                    "index": i,
                    "message": msg,
                    "finish_reason": st["finish"],
                    "logprobs": dict(st["logprobs"]) or None,
                    **st["extra"],
                }
            )
        body["choices"] = choices
        if self.usage is not None:
            body["usage"] = self.usage
        return body, first_field(choices, "finish_reason")


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


class ResponsesStream(StreamHandler):
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
            self.error = error_of(data)
            return
        oi = index_of(data, "output_index")
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(data.get("item"), dict):
                self.items[oi] = data["item"]
                if kind.endswith(".done"):
                    self.done.add(oi)
            return
        if oi in self.done:
            return  # the done item already holds the final text
        if kind in _RESPONSES_PARTS:
            part_group, part_index = _RESPONSES_PARTS[kind]
            if isinstance(data.get("part"), dict):
                self.parts.setdefault(oi, {})[(part_group, index_of(data, part_index))] = dict(data["part"])
        elif kind == "response.output_text.annotation.added":
            part = self.parts.setdefault(oi, {}).setdefault(
                ("content", index_of(data, "content_index")), {"type": "output_text", "text": ""}
            )
            if not isinstance(part.get("annotations"), list):
                part["annotations"] = []
            part["annotations"].append(data.get("annotation"))
        elif kind in _RESPONSES_DELTAS and isinstance(data.get("delta"), str):
            group, index_key, field, part_type = _RESPONSES_DELTAS[kind]
            ci = index_of(data, index_key) if index_key else 0
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
                item[field] = joined(item.get(field), pieces)
            else:
                part = groups.setdefault(group, {}).setdefault(ci, {"type": part_type})
                part[field] = joined(part.get(field), pieces)
        for group, parts in groups.items():
            current = item.get(group)
            merged = dict(enumerate(current if isinstance(current, list) else ()))
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
        return body, responses_stop(body)
