"""The ``subagents`` builtin: the ``task`` tool, which hands one task to a child agent and returns its answer.

The host passes in what a feature cannot reach itself: the child's tools, a callable that creates
the child's session on disk as a sub-session of the parent (so the session report bundles it), and
the host builtins the child runs with. The model client is the host's (``api.host.client``). Each
run is recorded in the parent's session state under ``subagents``, which the checkpoint appendix
carries (docs/architecture.md, "Sub-agents").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.settings import HostOptions, host_settings
from ..core.spi import Extension, ExtensionAPI
from ..core.tools import Tool, ToolContext, ToolError, ToolOutput
from .child import Budget, ChildResult, NewChild, run_child

SUBAGENTS_ID = "subagents"
STATE_KEY = "subagents"
MAX_STEPS_CAP = 50
ANSWER_KEPT_CHARS = 400
DESCRIPTION = (
    "Hand a self-contained task to a sub-agent. It works with its own context, its own tools ({tools}) "
    "and a step budget, and its final answer comes back as this tool's result. Give it everything it "
    "needs in prompt: it does not see this conversation."
)
PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "A few words naming the task"},
        "prompt": {"type": "string", "description": "The full task for the sub-agent"},
        "max_steps": {
            "type": "integer",
            "description": f"Step budget (default from settings, at most {MAX_STEPS_CAP})",
        },
    },
    "required": ["description", "prompt"],
}


def _record(ctx: ToolContext, description: str, result: ChildResult) -> None:
    runs = ctx.session.state.get(STATE_KEY) or {}
    runs[result.session_id] = {
        "task": description,
        "outcome": result.outcome,
        "steps": result.steps,
        "turn": ctx.turn,
        "answer": result.text[:ANSWER_KEPT_CHARS],
    }
    ctx.session.state.set(STATE_KEY, runs)


def task_tool(
    *,
    host_client: Callable[[], Any],
    new_child: NewChild,
    tools: Sequence[Tool],
    builtins: Callable[[], Sequence[Extension]],
    default_budget: Budget,
) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        client = host_client()
        if client is None:
            raise ToolError("sub-agents need a host with a model client")
        prompt, description = args["prompt"].strip(), args["description"].strip() or "task"
        if not prompt:
            raise ToolError("prompt is empty: give the sub-agent its whole task")
        steps = args.get("max_steps") or default_budget.max_steps
        if not 1 <= steps <= MAX_STEPS_CAP:
            raise ToolError(f"max_steps must be between 1 and {MAX_STEPS_CAP}")
        home = new_child(ctx.session.id, description)
        result = await run_child(
            client=client,
            parent=ctx.session,
            home=home,
            prompt=prompt,
            tools=tools,
            budget=Budget(steps, default_budget.max_output_tokens),
            builtins=builtins(),
        )
        _record(ctx, description, result)
        details = {
            "subagent_session": result.session_id,
            "outcome": result.outcome,
            "steps": result.steps,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
        }
        if not result.ok:
            why = result.reason or result.outcome
            return ToolOutput(
                f"Error: the sub-agent stopped ({result.outcome}: {why}) after {result.steps} steps."
                + (f"\n{result.text}" if result.text else ""),
                True,
                details,
            )
        return ToolOutput(result.text or "(the sub-agent gave an empty answer)", False, details)

    return Tool("task", DESCRIPTION.replace("{tools}", ", ".join(t.name for t in tools)), PARAMETERS, execute)


def create_subagents(
    options: HostOptions,
    *,
    new_child: NewChild,
    tools: Sequence[Tool],
    builtins: Callable[[], Sequence[Extension]] = tuple,
) -> Extension:
    """The builtin; settings table ``[subagents]``: ``maxSteps`` (12), ``maxOutputTokens`` (the client's)."""
    table = host_settings(options).get("subagents") or {}
    budget = Budget(int(table.get("maxSteps", Budget.max_steps)), table.get("maxOutputTokens"))

    def init(api: ExtensionAPI) -> None:
        host = api.host
        api.register_tool(
            task_tool(
                host_client=lambda: host.client if host is not None else None,
                new_child=new_child,
                tools=tools,
                builtins=builtins,
                default_budget=budget,
            )
        )

    return Extension(SUBAGENTS_ID, init, "the task tool: a child agent with its own context, tools and budget")
