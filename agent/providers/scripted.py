"""A scripted, in-process model client that records exactly what it received (like pydantic-ai's FunctionModel).

Each model request consumes one script item: a string (text answer), a ``ModelResponse``, an
exception (raised), or a function ``(ModelRequest) -> item`` (sync or async, e.g. to wait on an
event in a cancellation test). ``requests`` holds every ``ModelRequest`` in order, so tests can
assert on the messages after reminders, steering or history replacement.
"""

from __future__ import annotations

import inspect
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..core.messages import Message, TextBlock, ToolCall, message_to_dict
from ..core.model import STOP, TOOL_USE, DeltaSink, ModelRequest, ModelResponse, PreparedCall, TextDelta, Usage, dumps

_ids = itertools.count(1)
ScriptItem = str | ModelResponse | BaseException | Callable[[ModelRequest], Any]


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> ToolCall:
    return ToolCall(id or f"call_{next(_ids)}", name, dict(arguments or {}))


def answer(text: str = "", *calls: ToolCall, usage: Usage | None = None) -> ModelResponse:
    blocks = ((TextBlock(text),) if text else ()) + tuple(calls)
    return ModelResponse(Message("assistant", blocks), TOOL_USE if calls else STOP, usage or Usage(10, 5))


class ScriptedModel:
    provider = "scripted"
    api = "scripted"

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        model: str = "scripted-model",
        context_window: int = 128_000,
        max_output_tokens: int = 4096,
        default: str = "done",
    ) -> None:
        self.script: deque[ScriptItem] = deque(script)
        self.model = model
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.default = default
        self.requests: list[ModelRequest] = []
        self.calls: list[PreparedCall] = []

    def add(self, *items: ScriptItem) -> None:
        self.script.extend(items)

    def prepare(self, request: ModelRequest) -> PreparedCall:
        body = {
            "model": self.model,
            "system": request.system,
            "tools": [t.name for t in request.tools],
            "messages": [message_to_dict(m) for m in request.messages],
        }
        return PreparedCall(
            request, self.provider, self.api, self.model, "scripted://", dumps(body), dict(request.headers)
        )

    async def send(self, call: PreparedCall, on_delta: DeltaSink | None = None) -> ModelResponse:
        self.requests.append(call.request)
        self.calls.append(call)
        item: Any = self.script.popleft() if self.script else self.default
        while callable(item) and not isinstance(item, type):
            item = item(call.request)
            if inspect.isawaitable(item):
                item = await item
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, str):
            item = answer(item)
        if not isinstance(item, ModelResponse):
            raise TypeError(f"script item must become a ModelResponse, got {type(item).__name__}")
        if on_delta is not None and item.message.text:
            on_delta(TextDelta(item.message.text))
        return item

    async def aclose(self) -> None:
        pass

    @property
    def last(self) -> ModelRequest:
        return self.requests[-1]
