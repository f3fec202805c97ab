"""The replacement history and its post-admission check.

The whole history becomes one user message: a line saying the earlier conversation was compacted,
the checkpoint summary, then the host's appendix of state it verified itself — the last two
genuine user inputs verbatim (never ``/compact``), the todo list with its cadence counters,
background-task cadence and a sub-agent snapshot. The summariser is told not to write those, so
they cannot be paraphrased away. The message records ``kept_message_count = 0`` (no old tail is
kept) for the usage anchor, and the inputs it carried so a later compaction can carry them again.

Admission: the new history must fit the next request (input limit and byte limit); the sub-agent
snapshot is dropped first if it does not; if it still does not fit, ``POST_ADMISSION_FAILED``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.estimate import SUMMARY_KIND
from ...core.messages import Message, user_message
from ...core.state import render_todos as render_todos
from .history import genuine_inputs

POST_ADMISSION_FAILED = "POST_ADMISSION_FAILED"
APPENDIX_OPEN = "<context-appendix>"
APPENDIX_CLOSE = "</context-appendix>"
SUMMARY_INTRO = (
    "The earlier part of this conversation was compacted into the checkpoint summary below, followed by "
    "state the host recorded itself. Carry on with the work from here."
)


@dataclass(frozen=True)
class Appendix:
    recent_inputs: tuple[str, ...]
    todos: tuple[Mapping[str, Any], ...] = ()
    todo_cadence: Mapping[str, Any] | None = None
    background: Mapping[str, Any] | None = None
    subagents: Mapping[str, Any] | None = None


def _prefixed(state: Mapping[str, Any], *prefixes: str, exclude: tuple[str, ...] = ()) -> dict[str, Any] | None:
    found = {k: v for k, v in state.items() if k.startswith(prefixes) and k not in exclude and v not in (None, [], {})}
    return found or None


def build_appendix(messages: Sequence[Message], state: Mapping[str, Any], *, turn: int, step: int) -> Appendix:
    stored = state.get("todos")
    todos = stored if isinstance(stored, list) else []
    cadence = _prefixed(state, "todo", exclude=("todos",))
    if cadence is not None or todos:
        cadence = {**(cadence or {}), "now": {"turn": turn, "step": step}}
    return Appendix(
        tuple(genuine_inputs(messages)[-2:]),
        tuple(t for t in todos if isinstance(t, Mapping)),
        cadence,
        _prefixed(state, "background"),
        _prefixed(state, "subagent", "sub_agent"),
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def render_appendix(appendix: Appendix, *, with_subagents: bool = True) -> str:
    parts = [APPENDIX_OPEN, "Recorded by the host, not by the summary's author."]
    if appendix.recent_inputs:
        parts.append("\n### Latest user requests, verbatim (oldest first)")
        for i, text in enumerate(appendix.recent_inputs, 1):
            parts.append(f'<user-request n="{i}">\n{text}\n</user-request>')
    if appendix.todos or appendix.todo_cadence:
        parts.append("\n### Todo list")
        valid = [
            dict(t)
            for t in appendix.todos
            if t.get("status") in ("pending", "in_progress", "completed", "cancelled") and t.get("content")
        ]
        parts.append(render_todos(valid))
        if appendix.todo_cadence:
            parts.append("Todo cadence: " + _json(appendix.todo_cadence))
    if appendix.background:
        parts.append("\n### Background tasks\n" + _json(appendix.background))
    if with_subagents and appendix.subagents:
        parts.append("\n### Sub-agents\n" + _json(appendix.subagents))
    parts.append(APPENDIX_CLOSE)
    return "\n".join(parts)


def summary_message(summary: str, appendix: Appendix, *, with_subagents: bool = True, **meta: Any) -> Message:
    text = f"{SUMMARY_INTRO}\n\n<checkpoint-summary>\n{summary.strip()}\n</checkpoint-summary>\n\n" + render_appendix(
        appendix, with_subagents=with_subagents
    )
    return user_message(
        text, kind=SUMMARY_KIND, kept_message_count=0, recent_inputs=list(appendix.recent_inputs), **meta
    )


@dataclass(frozen=True)
class Admission:
    ok: bool
    messages: tuple[Message, ...]
    tokens: int  # estimate of the next request with this history
    dropped: tuple[str, ...] = ()
    error: str | None = None


def admit(
    summary: str, appendix: Appendix, fits: Callable[[list[Message]], tuple[bool, int]], **meta: Any
) -> Admission:
    """Try the full appendix, then without the sub-agent snapshot; else POST_ADMISSION_FAILED."""
    attempts: list[tuple[tuple[str, ...], bool]] = [((), True)]
    if appendix.subagents:
        attempts.append((("subagents",), False))
    tokens = 0
    messages: tuple[Message, ...] = ()
    for dropped, with_subagents in attempts:
        messages = (summary_message(summary, appendix, with_subagents=with_subagents, **meta),)
        ok, tokens = fits(list(messages))
        if ok:
            return Admission(True, messages, tokens, dropped)
    return Admission(False, messages, tokens, attempts[-1][0], POST_ADMISSION_FAILED)
