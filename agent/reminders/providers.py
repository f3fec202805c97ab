"""The default reminder providers: agent context, todo completion, pending session notices.

Each provider decides for itself whether it has something to say and returns a body (the
service wraps all bodies of a round into one block). Wording is ours.

- ``agent_context``: who and where the agent is. Full on the first round and after a compaction,
  a one-line form afterwards (the full form is already in the conversation).
- ``todo_completion`` (critical): open todos, at most once every ``TODO_EVERY_ROUNDS`` rounds.
- ``session_notices`` (critical): notices queued for the session since the last round, delivered once.
"""

from __future__ import annotations

from typing import Any

from ..core.state import MARKS, SessionState, open_todos
from .system import NOTICES_KEY, ReminderData, ReminderRegistry, set_full_context_due

TODO_EVERY_ROUNDS = 5
MAX_TODOS_SHOWN = 20
MAX_NOTICES_SHOWN = 10


def agent_context(d: ReminderData) -> str:
    if not d.full_context:
        return f'<agent-context session="{d.session_id}" date="{d.today}" />'
    lines = [
        "<agent-context>",
        f"agent: {d.agent_name}",
        f"session: {d.session_id}",
        f"workspace: {d.workspace}",
        f"model: {d.model} via {d.provider} ({d.api}), context window {d.context_window} tokens",
        f"date: {d.today}",
        f"input from: {d.source}",
        "</agent-context>",
    ]
    return "\n".join(lines)


def _agent_context_shown(state: SessionState, d: ReminderData) -> None:
    if d.full_context:
        set_full_context_due(state, False)


def _todo_line(t: dict[str, Any]) -> str:
    return f"{MARKS.get(t.get('status', 'pending'), '[ ]')} {t.get('content', '')}"


def todo_completion(d: ReminderData) -> str | None:
    left = open_todos(list(d.todos))
    if not left:
        return None
    since = d.rounds_since("todo_completion")
    if since is not None and since < TODO_EVERY_ROUNDS:
        return None
    shown = [_todo_line(t) for t in left[:MAX_TODOS_SHOWN]]
    if len(left) > MAX_TODOS_SHOWN:
        shown.append(f"... and {len(left) - MAX_TODOS_SHOWN} more")
    return "\n".join(
        [
            f"<todo-status>{len(left)} item(s) on your todo list are not finished:",
            *shown,
            "Finish them before you call the work done, or bring the list up to date with todowrite "
            "(mark finished items completed, cancel items that no longer apply).</todo-status>",
        ]
    )


def session_notices(d: ReminderData) -> str | None:
    texts = [str(n.get("text", "")).strip() for n in d.notices if isinstance(n, dict)]
    texts = [t for t in texts if t]
    if not texts:
        return None
    shown = texts[-MAX_NOTICES_SHOWN:]
    more = len(texts) - len(shown)
    lines = ["<session-notices>Things that happened in this session since your last turn:"]
    if more:
        lines.append(f"({more} earlier notice(s) omitted)")
    lines += [f"- {t}" for t in shown]
    return "\n".join(lines) + "</session-notices>"


def _drop_delivered(state: SessionState, d: ReminderData) -> None:
    """Remove the notices this round delivered; keep any queued while the round was built."""
    current = list(state.get(NOTICES_KEY) or [])
    state.set(NOTICES_KEY, current[len(d.notices) :])


def default_registry() -> ReminderRegistry:
    r = ReminderRegistry()
    r.append("agent_context", agent_context, on_delivered=_agent_context_shown)
    r.append_critical("todo_completion", todo_completion)
    r.append_critical("session_notices", session_notices, on_delivered=_drop_delivered)
    return r
