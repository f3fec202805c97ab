"""Request-body factories for the inspector's analysis tests: each test states only what matters;
``infer_pair`` reads two consecutive bodies the way the analysis does (prompts, relation, markers)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from jsonpointer import resolve_pointer

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.markers import infer_markers
from ctxscope.inspector.analyses.relation import CallContext, classify

EPHEMERAL = {"type": "ephemeral"}
SYSTEM_TEXT = "You are a careful coding agent. Work in small steps and explain what you change."


def long_text(words: int, seed: str = "alpha") -> str:
    """Text of roughly ``words`` o200k tokens (one per word), distinct per seed."""
    return " ".join(f"{seed}{i % 97}" for i in range(words))


def make_tool(name: str, description: str = "A tool.", **props) -> dict:
    properties = {k: {"type": "string", "description": v} for k, v in (props or {"path": "File path."}).items()}
    return {"name": name, "description": description, "input_schema": {"type": "object", "properties": properties}}


def user(content) -> dict:
    return {"role": "user", "content": content}


def assistant(content) -> dict:
    return {"role": "assistant", "content": content}


def text(t: str, **extra) -> dict:
    return {"type": "text", "text": t, **extra}


def tool_use(id_: str, name: str, **inp) -> dict:
    return {"type": "tool_use", "id": id_, "name": name, "input": inp}


def tool_result(id_: str, content="ok", **extra) -> dict:
    return {"type": "tool_result", "tool_use_id": id_, "content": content, **extra}


def reminder(t: str) -> str:
    return f"<system-reminder>\n{t}\n</system-reminder>"


def make_anthropic_body(system=None, tools=None, messages=None, model="claude-sonnet-4-5", **params) -> dict:
    body = {"model": model, "max_tokens": params.pop("max_tokens", 4096)}
    if tools is not None:
        body["tools"] = tools
    if system is not None:
        body["system"] = system
    body["messages"] = messages if messages is not None else [user("hello")]
    body.update(params)
    return body


def default_tools() -> list[dict]:
    return [
        make_tool("read_file", "Read a file.", path="File path."),
        make_tool("write_file", "Write a file.", path="File path.", content="New content."),
        make_tool("bash", "Run a shell command.", command="The command."),
    ]


def default_system(extra: str = "") -> list[dict]:
    return [text("You are a coding agent."), text(SYSTEM_TEXT + extra, cache_control=dict(EPHEMERAL))]


def claude_code_turns(
    n: int, *, system=None, tools=None, model="claude-sonnet-4-5", first="Fix the bug.", reminders=()
) -> list[dict]:
    """Bodies of an agent loop shaped like Claude Code's: each call appends a tool call and its
    result (plus a reminder block on the turns in ``reminders``), moves the last cache marker to the
    newest block, and re-sends a single-text-block message as a plain string once it is no longer
    last."""
    system = default_system() if system is None else system
    tools = default_tools() if tools is None else tools
    messages = [user([text(first, cache_control=dict(EPHEMERAL))])]
    bodies = [make_anthropic_body(copy.deepcopy(system), copy.deepcopy(tools), copy.deepcopy(messages), model)]
    for i in range(1, n):
        last = messages[-1]
        for block in last["content"] if isinstance(last["content"], list) else []:
            block.pop("cache_control", None)
        if isinstance(last["content"], list) and len(last["content"]) == 1 and last["content"][0]["type"] == "text":
            last["content"] = last["content"][0]["text"]
        messages.append(assistant([text(f"Step {i}: reading."), tool_use(f"tu_{i}", "read_file", path=f"f{i}.py")]))
        blocks = [tool_result(f"tu_{i}", f"contents of f{i}.py")]
        if i in reminders:
            blocks.append(text(reminder(f"Turn {i}: the todo list is empty.")))
        blocks[-1]["cache_control"] = dict(EPHEMERAL)
        messages.append(user(blocks))
        bodies.append(make_anthropic_body(copy.deepcopy(system), copy.deepcopy(tools), copy.deepcopy(messages), model))
    return bodies


def make_chat_body(messages=None, tools=None, model="gpt-4.1", **params) -> dict:
    body = {"model": model, "messages": messages or [{"role": "user", "content": "hello"}]}
    if tools is not None:
        body["tools"] = tools
    body.update(params)
    return body


def chat_tool(name: str, description: str = "A tool.") -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }


def make_responses_body(input=None, instructions=None, tools=None, model="gpt-5", **params) -> dict:
    body = {"model": model, "input": input if input is not None else "hello"}
    if instructions is not None:
        body["instructions"] = instructions
    if tools is not None:
        body["tools"] = tools
    body.update(params)
    return body


def assert_pointers_resolve(prompt, body) -> None:
    for seg in prompt.segments:
        assert seg.pointer.startswith("/"), seg.pointer
        resolve_pointer(body, seg.pointer)  # raises when the pointer does not resolve


COUNTER = TokenCounter()


@dataclass(frozen=True)
class InferredPair:
    prev: Any  # CanonicalPrompt | None
    cur: Any
    relation: Any
    markers: list


def infer_pair(prev_body, cur_body, api="anthropic.messages") -> InferredPair:
    """Canonical prompts of two consecutive calls of one provider, their relation and the inferred markers."""
    prev = canonicalize(api, prev_body) if prev_body is not None else None
    cur = canonicalize(api, cur_body)
    prev_ctx = CallContext(prev, "p", api, 0, prev_body) if prev is not None else None
    relation = classify(prev_ctx, CallContext(cur, "p", api, 0, cur_body))
    prev_tokens = COUNTER.count_prompt(prev).total if prev is not None else None
    markers = infer_markers(prev, cur, relation, prev_tokens, COUNTER.count_prompt(cur).total)
    return InferredPair(prev, cur, relation, markers)
