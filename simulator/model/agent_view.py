"""What the simulated agent reads in a request: its task, the tools it declares, the tool rounds since.

The task is the first text the user typed after the last final answer (reminder blocks left out; a
text sent while tools run, such as a steer, is not a new task); the rounds are the calls and results
after that text, in any API's shape (Gemini's id-less calls are paired by name and order)
(docs/architecture.md, "The simulator's agentic answers").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxscope.simulator.model.prompt import Block, Prompt

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


@dataclass(frozen=True)
class Round:
    """One tool call the model made after the task, and the result the request carries for it."""

    name: str
    arguments: dict[str, Any]
    result: str | None
    is_error: bool = False


@dataclass(frozen=True)
class AgentView:
    """What the simulated agent reads in a request."""

    task: str
    tools: tuple[str, ...]
    rounds: tuple[Round, ...]
    custom: frozenset[str] = frozenset()  # the declared tools that take free-form input (Responses custom tools)


def declared_tools(blocks: Sequence[Block]) -> tuple[str, ...]:
    """Names of the tools a request declares, in its order (all APIs' shapes)."""
    return tuple(name for name, _ in _declared(blocks))


def _declared(blocks: Sequence[Block]) -> list[tuple[str, bool]]:
    """(name, takes free-form input) of each declared tool. Codex declares its tools in an
    ``additional_tools`` input item, grouped in namespaces, beside (or instead of) ``tools``."""
    found: list[tuple[str, bool]] = []
    for block in blocks:
        if block.meta == "item|additional_tools":
            try:
                item = json.loads(block.text)
            except ValueError:
                continue
            groups = item.get("tools") if isinstance(item, dict) else None
            for group in groups if isinstance(groups, list) else []:
                found.extend(_tool_names(group))
        elif block.meta == "tool":
            try:
                found.extend(_tool_names(json.loads(block.text)))
            except ValueError:
                continue
    return found


def _tool_names(tool: Any) -> list[tuple[str, bool]]:
    names: list[tuple[str, bool]] = []
    if not isinstance(tool, dict):
        return names
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return [name for inner in tool["tools"] for name in _tool_names(inner)]
    custom = tool.get("type") == "custom"
    # Gemini nests its functions: {"functionDeclarations": [{"name": ...}, ...]}
    nested = tool.get("functionDeclarations", tool.get("function_declarations"))
    for entry in nested if isinstance(nested, list) else [tool]:
        fn = entry.get("function") if isinstance(entry, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            names.append((name, custom))
    return names


def _clean(text: str) -> str:
    return " ".join(_REMINDER.sub(" ", text).split())


def _is_user_text(meta: str) -> bool:
    return meta.startswith(("msg:user|", "cont:user|", "content:user|")) and meta.endswith("|text")


def _is_assistant_text(meta: str) -> bool:
    return meta.startswith(("msg:assistant|", "cont:assistant|", "content:model|")) and meta.endswith("|text")


def _call_of(meta: str) -> tuple[str, str] | None:
    """(call id, tool name) of a tool-call block: Anthropic tool_use, Chat tool_call, Responses function_call."""
    parts = meta.split("|")
    if len(parts) >= 4 and parts[1] == "tool_use":
        return parts[2], parts[3]
    if len(parts) >= 3 and parts[0] in ("tool_call", "function_call", "custom_tool_call"):
        return parts[1], parts[2]
    return None


def _result_of(meta: str) -> tuple[str, bool] | None:
    """(call id, is_error) of a tool-result block in any of the three shapes."""
    parts = meta.split("|")
    if len(parts) >= 4 and parts[1] == "tool_result":
        return parts[2], parts[3] == "True"
    if parts[0] == "function_call_output" and len(parts) >= 2:
        return parts[1], False
    if parts[0] == "msg:tool" and len(parts) >= 3:
        return parts[2], False
    return None


def json_arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _with_gemini_call_ids(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """Gemini's calls and results carry no id, only the function's name: the k-th result of a name
    answers its k-th call. They get ids in the shape of the Responses API's blocks, so one reader serves all."""
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    out = []
    for block in blocks:
        parts = block.meta.split("|")
        if len(parts) == 3 and parts[0] == "content:model" and parts[1] == "call":
            calls[parts[2]] = calls.get(parts[2], 0) + 1
            block = replace(block, meta=f"function_call|{parts[2]}#{calls[parts[2]]}|{parts[2]}")
        elif len(parts) == 3 and parts[0] == "content:user" and parts[1] == "result":
            results[parts[2]] = results.get(parts[2], 0) + 1
            block = replace(block, meta=f"function_call_output|{parts[2]}#{results[parts[2]]}")
        out.append(block)
    return tuple(out)


def read_view(prompt: Prompt) -> AgentView:
    """The task, the declared tools and the tool rounds after the task, from the linearised prompt."""
    blocks = _with_gemini_call_ids(prompt.blocks)
    start, task, open_task = 0, "", False  # open_task: tools were called for the task and no final answer yet
    for i, block in enumerate(blocks):
        if _is_user_text(block.meta) and _clean(block.text):
            if not open_task:  # a new task; a text sent while tools run (a steer, a reminder) is not one
                start, task = i, _clean(block.text)
        elif _is_assistant_text(block.meta) and block.text.strip():
            open_task = False
        elif _call_of(block.meta) is not None:
            open_task = True
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    order: list[str] = []
    results: dict[str, tuple[str, bool]] = {}
    for block in blocks[start:]:
        call = _call_of(block.meta)
        if call is not None:
            free_form = block.meta.startswith("custom_tool_call|")
            calls[call[0]] = (call[1], {"input": block.text} if free_form else json_arguments(block.text))
            order.append(call[0])
            continue
        result = _result_of(block.meta)
        if result is not None:
            results[result[0]] = (block.text, result[1] or block.text.startswith("Error:"))
    rounds = tuple(
        Round(calls[i][0], calls[i][1], results.get(i, (None, False))[0], results.get(i, (None, False))[1])
        for i in order
    )
    declared = _declared(blocks)
    return AgentView(task, tuple(n for n, _ in declared), rounds, frozenset(n for n, custom in declared if custom))
