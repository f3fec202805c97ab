"""In-turn reminders on ``before_llm_call``, each admitted against the provider input limit (``admission``).

- Execution deadline: a turn with a time budget gets the remaining seconds on every request. It is
  a request-only modification (``ModifyRequest``), never persisted, and its message is marked
  ``request_only`` so the Anthropic client keeps its cache breakpoint in front of it.
- Todo cadence: once 15 assistant iterations have passed since both the last todowrite and the
  last such reminder, and todos are still open, a hidden message is appended to history.
- Background-task cadence: the same rule for tasks still running in the background
  (session state ``background_tasks``: ``[{"id", "status", "description"}]``).

Counters are session state (``todo_cadence``, ``background_cadence``), so they survive resumes and
the compaction appendix carries them.
Request-only modifiers run before appenders (the registry orders them), so one request can carry
both a deadline and one cadence reminder.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxscope.vocab.kinds import MarkerKind

from ..core.assembly import reminder_block
from ..core.events import AppendMessage, LlmCallContext, ModifyRequest, StepEnd, TurnStart
from ..core.messages import user_message
from ..core.state import MARKS, ModelInfo, SessionState, open_todos
from .admission import fits_reminder_in_final_request, provider_input_limit, request_tokens

log = logging.getLogger("ctxscope.agent.reminders.system")

TODO_CADENCE_KEY = "todo_cadence"  # {since_todowrite, since_reminder}; named so the compaction appendix carries it
BACKGROUND_CADENCE_KEY = "background_cadence"  # {since_reminder}
DEADLINE_KEY = "turn_deadline_seconds"  # per-session override of the configured deadline
BACKGROUND_KEY = "background_tasks"
TODO_CADENCE_ITERATIONS = 15
BACKGROUND_CADENCE_ITERATIONS = 15


def read_counters(state: SessionState) -> dict[str, int]:
    """``since_todowrite``, ``since_todo_reminder``, ``since_background_reminder`` (assistant iterations)."""
    todo, bg = state.get(TODO_CADENCE_KEY) or {}, state.get(BACKGROUND_CADENCE_KEY) or {}
    return {
        "since_todowrite": int(todo.get("since_todowrite", 0)),
        "since_todo_reminder": int(todo.get("since_reminder", 0)),
        "since_background_reminder": int(bg.get("since_reminder", 0)),
    }


def write_counters(state: SessionState, c: dict[str, int]) -> None:
    state.set(TODO_CADENCE_KEY, {"since_todowrite": c["since_todowrite"], "since_reminder": c["since_todo_reminder"]})
    state.set(BACKGROUND_CADENCE_KEY, {"since_reminder": c["since_background_reminder"]})


def count_iteration(state: SessionState, wrote_todos: bool) -> dict[str, int]:
    """One assistant iteration passed; a successful todowrite restarts its counter."""
    c = {k: v + 1 for k, v in read_counters(state).items()}
    if wrote_todos:
        c["since_todowrite"] = 0
    write_counters(state, c)
    return c


def todo_cadence_due(counters: dict[str, int], every: int = TODO_CADENCE_ITERATIONS) -> bool:
    return counters["since_todowrite"] >= every and counters["since_todo_reminder"] >= every


def deadline_text(remaining: float) -> str:
    if remaining <= 0:
        return reminder_block(
            "The time budget for this turn is used up. Do not start anything new: "
            "give your final answer now, including what is still unfinished."
        )
    return reminder_block(
        f"Time budget: about {int(remaining)} seconds remain for this turn. Put finishing "
        "and reporting first and leave optional work out."
    )


def todo_cadence_text(todos: list[dict[str, Any]], iterations: int) -> str:
    left = open_todos(todos)
    lines = [f"{MARKS.get(t['status'], '[ ]')} {t['content']}" for t in left[:20]]
    return reminder_block(
        f"Your todo list has not changed in the last {iterations} steps; open items:",
        *lines,
        "If it no longer matches what you are doing, update it with todowrite; if it does, carry on. "
        "This note comes from the host, not from the user.",
    )


def background_text(tasks: list[dict[str, Any]], iterations: int) -> str:
    lines = [f"- {t.get('id', '?')}: {t.get('description') or t.get('command') or 'task'}" for t in tasks[:20]]
    return reminder_block(
        f"{len(tasks)} background task(s) are still running (last mentioned {iterations} steps ago):",
        *lines,
        "Check on them when their result matters for your next step; do not wait on them idly. "
        "This note comes from the host, not from the user.",
    )


@dataclass
class _TurnClock:
    turn: int
    started: float
    budget: float | None


class InTurnReminders:
    """Handlers for one runtime; per-session data is keyed by session id."""

    def __init__(
        self,
        *,
        deadline_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        input_limit: Callable[[ModelInfo], int] | None = None,
        todo_every: int = TODO_CADENCE_ITERATIONS,
        background_every: int = BACKGROUND_CADENCE_ITERATIONS,
    ) -> None:
        self.deadline_seconds = deadline_seconds
        self.clock = clock
        self.input_limit = input_limit or (lambda m: provider_input_limit(m.context_window, m.max_output_tokens))
        self.todo_every, self.background_every = todo_every, background_every
        self._clocks: dict[str, _TurnClock] = {}
        self.dropped: list[str] = []  # kinds dropped by admission, for tests and diagnostics

    # --- turn and step bookkeeping ---------------------------------------------------------------
    def turn_start(self, e: TurnStart) -> None:
        override = e.session.state.get(DEADLINE_KEY)
        budget = float(override) if override else self.deadline_seconds
        self._clocks[e.session.id] = _TurnClock(e.turn, self.clock(), budget if budget and budget > 0 else None)

    def step_end(self, e: StepEnd) -> None:
        wrote = any(r.name == "todowrite" and not r.is_error for r in e.results)
        count_iteration(e.session.state, wrote)

    # --- before_llm_call ---------------------------------------------------------------------------
    def _admit(self, ctx: LlmCallContext, text: str, source: str) -> bool:
        tokens = request_tokens(ctx.system, ctx.tools, ctx.request_messages)
        if fits_reminder_in_final_request(tokens, text, self.input_limit(ctx.session.model)):
            return True
        self.dropped.append(source)
        ctx.effects.declare(MarkerKind.REMINDER_DROPPED, source=source)
        log.info("%s reminder dropped: the request would exceed the provider input limit", source)
        return False

    def deadline(self, ctx: LlmCallContext) -> ModifyRequest | None:
        clock = self._clocks.get(ctx.session.id)
        if clock is None or clock.turn != ctx.turn or clock.budget is None:
            return None
        remaining = clock.budget - (self.clock() - clock.started)
        text = deadline_text(remaining)
        if not self._admit(ctx, text, "deadline"):
            return None
        msg = user_message(text, kind="deadline_reminder", hidden=True, request_only=True, turn=ctx.turn)
        ctx.effects.declare(MarkerKind.REMINDER, source="deadline", remaining_s=max(0, int(remaining)))
        return ModifyRequest(messages=tuple(ctx.request_messages) + (msg,))

    def cadence(self, ctx: LlmCallContext) -> AppendMessage | None:
        """At most one appended reminder per request: todo cadence first, then background tasks."""
        state = ctx.session.state
        counters = read_counters(state)
        todos = state.get("todos") or []
        if open_todos(todos) and todo_cadence_due(counters, self.todo_every):
            text = todo_cadence_text(todos, counters["since_todowrite"])
            if self._admit(ctx, text, "todo_cadence"):
                write_counters(state, {**counters, "since_todo_reminder": 0})
                ctx.effects.declare(
                    MarkerKind.TODO_REMINDER, since_todowrite=counters["since_todowrite"], open=len(open_todos(todos))
                )
                return AppendMessage(user_message(text, kind="todo_reminder", hidden=True, turn=ctx.turn))
        running = [t for t in state.get(BACKGROUND_KEY) or [] if isinstance(t, dict) and t.get("status") == "running"]
        if running and counters["since_background_reminder"] >= self.background_every:
            text = background_text(running, counters["since_background_reminder"])
            if self._admit(ctx, text, "background_tasks"):
                write_counters(state, {**counters, "since_background_reminder": 0})
                ctx.effects.declare(MarkerKind.REMINDER, source="background_tasks", running=len(running))
                return AppendMessage(user_message(text, kind="background_reminder", hidden=True, turn=ctx.turn))
        return None
