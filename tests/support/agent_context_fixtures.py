"""Factories for the context-management tests: runtimes with just the context builtins, sized outputs, summaries."""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ctxscope.agent.context.compaction.auto import ContextManager, context_manager
from ctxscope.agent.context.compaction.checkpoint import CONTROL_OPEN, SECTIONS
from ctxscope.agent.context.tool_output_budget import tool_output_budget_extension
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.messages import Message, ToolResult, assistant_message, tool_message, user_message
from ctxscope.agent.core.model import ModelRequest, Usage
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.tools import Tool, ToolOutput
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.vocab.tokens import count_tokens

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma")


def filler(tag: str, tokens: int) -> str:
    """Deterministic text of about ``tokens`` o200k tokens (lines ``<tag> <n> words...``)."""
    lines, total, n = [], 0, 0
    while total < tokens:
        line = f"{tag} {n:05d} " + " ".join(WORDS[(n + k) % len(WORDS)] for k in range(6))
        lines.append(line)
        total += count_tokens(line) + 1
        n += 1
    return "\n".join(lines)


def kib_text(tag: str, kib: float) -> str:
    line_no, out, size = 0, [], 0
    while size < kib * 1024:
        line = f"{tag} line {line_no:05d}: " + "x" * 40
        out.append(line)
        size += len(line) + 1
        line_no += 1
    return "\n".join(out)


async def _blob(args: dict[str, Any], ctx: Any) -> ToolOutput:
    text = filler(args["tag"], int(args["tokens"])) if "tokens" in args else kib_text(args["tag"], args["kib"])
    media = [{"type": "image", "origin": "computer_use", "data": "..."} for _ in range(int(args.get("images", 0)))]
    return ToolOutput(text, bool(args.get("error")), {"media": media} if media else {})


BLOB = Tool(
    "blob",
    "Print sized test output.",
    {
        "type": "object",
        "properties": {
            "tag": {"type": "string"},
            "kib": {"type": "number"},
            "tokens": {"type": "integer"},
            "error": {"type": "boolean"},
            "images": {"type": "integer"},
        },
        "required": ["tag"],
    },
    _blob,
)


def tools_extension(*tools: Tool) -> Extension:
    def init(api: Any) -> None:
        for t in tools:
            api.register_tool(t)

    return Extension("test-tools", init)


def blob(tag: str, **kw: Any):
    return tool_call("blob", {"tag": tag, **kw}, id=f"call_{tag}")


def summary(*, skip: Iterable[str] = (), body: str = "kept") -> str:
    return "\n".join(f"## {s}\n{body}" for s in SECTIONS if s not in set(skip))


def is_checkpoint(request: ModelRequest) -> bool:
    return bool(request.messages) and CONTROL_OPEN in request.messages[-1].text


def rung_of(request: ModelRequest) -> str | None:
    m = re.search(r"rung=(\w+)", request.headers.get("x-ctxscope-event", ""))
    return m.group(1) if m else None


class RoutedModel(ScriptedModel):
    """ScriptedModel whose checkpoint requests are answered by ``checkpoint(request)`` instead of the script."""

    def __init__(
        self,
        script: Iterable[Any] = (),
        *,
        checkpoint: Callable[[ModelRequest], Any] | None = None,
        usage: bool = True,
        enforce: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(script, **kw)
        self.checkpoint = checkpoint or (lambda req: summary())
        self.checkpoints: list[ModelRequest] = []
        self.realistic_usage = usage
        self.enforce = enforce  # refuse a prompt over this many tokens, as a provider refuses one over its window
        self.refused: list[int] = []

    async def send(self, call, on_delta=None):
        req = call.request
        if self.enforce is not None:
            from ctxscope.agent.core.estimate import estimate_request
            from ctxscope.agent.core.model import ContextOverflowError

            tokens = estimate_request(req.system, req.tools, req.messages).total
            if tokens > self.enforce:
                self.refused.append(tokens)
                raise ContextOverflowError(f"prompt is too long: {tokens} tokens > {self.enforce} maximum")
        if is_checkpoint(req):
            self.checkpoints.append(req)
            item = self.checkpoint(req)
            if isinstance(item, BaseException):
                raise item
            return answer(item) if isinstance(item, str) else item
        response = await super().send(call, on_delta)
        if self.realistic_usage and response.usage is not None and response.usage.input_tokens == 10:
            from dataclasses import replace

            from ctxscope.agent.core.estimate import estimate_request

            est = estimate_request(req.system, req.tools, req.messages).total
            response = replace(response, usage=Usage(est, 5))
        return response

    @property
    def main_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if not is_checkpoint(r)]


def make_rt(
    tmp_path,
    script=(),
    *,
    window: int = 128_000,
    output: int = 4096,
    settings: dict | None = None,
    tools: Iterable[Tool] = (BLOB,),
    hooks=None,
    extensions: Iterable[Extension] = (),
    core: bool = True,
    checkpoint=None,
    model=None,
    enforce: int | None = None,
    **kw: Any,
):
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    model = model or RoutedModel(
        script, checkpoint=checkpoint, context_window=window, max_output_tokens=output, enforce=enforce
    )
    st = ContextSettings.from_mapping(settings or {})
    exts = ([core_tools_extension()] if core else []) + [tools_extension(*tools), *extensions]
    manager = context_manager(settings=st, hooks=hooks)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=exts,
        host_builtins=[manager.extension(), tool_output_budget_extension(settings=st)],
        **kw,
    )
    _MANAGERS[rt] = manager
    return rt, model, rt.create_session()


_MANAGERS: weakref.WeakKeyDictionary[AgentRuntime, ContextManager] = weakref.WeakKeyDictionary()


def manager_for(rt: AgentRuntime) -> ContextManager:
    """The context manager ``make_rt`` built for ``rt`` (to look inside it)."""
    return _MANAGERS[rt]


def round_messages(tag: str, text: str, *, name: str = "blob", error: bool = False, details=None) -> list[Message]:
    call = tool_call(name, {"tag": tag}, id=f"call_{tag}")
    return [assistant_message("", [call]), tool_message([ToolResult(call.id, name, text, error, details or {})])]


def user(text: str) -> Message:
    return user_message(text, kind="input", genuine_text=text)
