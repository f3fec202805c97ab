"""One child agent run: its own session folder, history, tools and budget, its calls in the parent's session.

The child is a single turn of the core loop over a fresh history. Its requests carry the parent's
session id, so the inspector files them as a side thread of the parent's session, and name the
child in ``x-ctxscope-subagent``; its system prompt names the child too, so two children of one
session never share a thread (docs/architecture.md, "Sub-agents").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxscope.vocab.headers import Annotation

from ..core import activity as act
from ..core.dispatch import ErrorLog
from ..core.events import TurnStart
from ..core.history import History, HistoryFile
from ..core.loop import LoopConfig, SteeringQueue, TurnRunner
from ..core.model import DeltaSink, ModelClient, ModelRequest, ModelResponse, PreparedCall
from ..core.spi import Extension, ExtensionAPI, Registry
from ..core.state import SessionState, SessionView
from ..core.tools import Tool

SOURCE = "task"
CHILD_PROMPT = """\
You are sub-agent {child} of ctxscope-agent, working in the directory {workspace}.
Another agent handed you one task. Use the tools to look at files and run commands; change nothing unless the task asks.
Your final answer goes back to that agent as the task's result: state what you found, with file names, briefly."""


@dataclass(frozen=True)
class ChildHome:
    """Where a child session lives: its id, its folder and its history file."""

    id: str
    dir: Path
    history: HistoryFile


# (parent session id, title) -> a new child session on disk, recorded as the parent's sub-session
NewChild = Callable[[str, str], ChildHome]


@dataclass(frozen=True)
class Budget:
    max_steps: int = 12
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class ChildResult:
    session_id: str
    outcome: str
    text: str
    reason: str | None
    steps: int
    input_tokens: int
    output_tokens: int

    @property
    def ok(self) -> bool:
        return self.outcome == act.COMPLETED


class ChildClient:
    """The parent's model client, re-labelled: the parent's session header and the child's own marker."""

    def __init__(self, inner: ModelClient, parent_session: str, child_session: str) -> None:
        self._inner, self._parent, self._child = inner, parent_session, child_session
        self.provider, self.api, self.model = inner.provider, inner.api, inner.model
        self.context_window, self.max_output_tokens = inner.context_window, inner.max_output_tokens

    def prepare(self, request: ModelRequest) -> PreparedCall:
        headers = {**request.headers, Annotation.SESSION.value: self._parent, Annotation.SUBAGENT.value: self._child}
        return self._inner.prepare(dataclasses.replace(request, headers=headers))

    async def send(self, call: PreparedCall, on_delta: DeltaSink | None = None) -> ModelResponse:
        return await self._inner.send(call, on_delta)

    async def aclose(self) -> None:
        """The parent's client belongs to the parent's runtime: nothing to close here."""


def _tools_extension(tools: Sequence[Tool]) -> Extension:
    def init(api: ExtensionAPI) -> None:
        for tool in tools:
            api.register_tool(tool)

    return Extension("subagent-tools", init, "the tools a sub-agent may use")


async def run_child(
    *,
    client: ModelClient,
    parent: SessionView,
    home: ChildHome,
    prompt: str,
    tools: Sequence[Tool],
    budget: Budget,
    builtins: Sequence[Extension] = (),
) -> ChildResult:
    """Run ``prompt`` as the child's one turn; its final answer (or why it stopped) comes back."""
    state = SessionState(persist=home.history.append_state)
    view = SessionView(home.id, home.dir, home.dir / "artifacts", parent.workspace, state, parent.model)
    registry = Registry([_tools_extension(tools)], list(builtins))
    system = CHILD_PROMPT.replace("{child}", home.id).replace("{workspace}", str(parent.workspace))
    assembly = registry.assemble(TurnStart(view, 1, SOURCE, prompt), base_system_prompt=system)
    home.history.append_turn_start(1, SOURCE, prompt)
    runner = TurnRunner(
        session=view,
        client=ChildClient(client, parent.id, home.id),
        assembly=assembly,
        history=History([], 0, home.history),
        turn=1,
        source=SOURCE,
        config=LoopConfig(max_steps=budget.max_steps, max_output_tokens=budget.max_output_tokens),
        steering=SteeringQueue(),
        errors=ErrorLog(),
        emit=lambda _activity: None,
    )
    result = await runner.run(prompt)
    return ChildResult(
        home.id,
        result.outcome,
        result.text,
        result.reason,
        result.steps,
        result.usage.input_tokens,
        result.usage.output_tokens,
    )
