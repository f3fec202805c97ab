"""Empty-answer recovery: after tools that all succeeded, an empty answer is asked for once more.

A model sometimes ends a turn with nothing: no tool call and no visible text (thinking alone does
not count) right after its tools finished. The first time, the answer is rejected (``Retry``: its
tool calls are dropped, so it has no side effects) with a request for a concise final summary;
if the next answer is empty as well, the turn fails with reason ``terminal_empty`` instead of
ending silently. Mounted by default as an ordinary extension (it can be disabled per session).
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxscope.vocab.kinds import MarkerKind

from ..core.events import Event, Fail, LlmCallResult, Retry, StepEnd, TurnStart
from ..core.messages import is_empty_answer
from ..core.spi import Extension, ExtensionAPI

RECOVERY_ID = "terminal-response-recovery"
TERMINAL_EMPTY = "terminal_empty"
FOLLOW_UP = (
    "Your tools all finished, but your reply was empty. Write a short final answer for the user that "
    "sums up what was done and what came out of it."
)


@dataclass
class _Watch:
    turn: int
    tools_ok: bool = False  # the last step ran tools and none failed
    retried: bool = False  # we already asked once since those tools


class TerminalResponseRecovery:
    def __init__(self) -> None:
        self._sessions: dict[str, _Watch] = {}

    def turn_start(self, e: TurnStart) -> None:
        self._sessions[e.session.id] = _Watch(e.turn)

    def step_end(self, e: StepEnd) -> None:
        w = self._sessions.get(e.session.id)
        if w is None or w.turn != e.turn:
            w = self._sessions[e.session.id] = _Watch(e.turn)
        w.tools_ok = bool(e.results) and not any(r.is_error for r in e.results)
        w.retried = False

    def after_llm_call(self, c: LlmCallResult) -> Retry | Fail | None:
        w = self._sessions.get(c.session.id)
        if w is None or w.turn != c.turn or not w.tools_ok or not is_empty_answer(c.response.message):
            if w is not None and w.turn == c.turn:
                w.retried = False
            return None
        if w.retried:
            return Fail(TERMINAL_EMPTY)
        w.retried = True
        c.effects.declare(MarkerKind.EMPTY_ANSWER_RETRY, attempt=1)
        return Retry(FOLLOW_UP, "empty_answer")


def terminal_response_recovery_extension() -> Extension:
    recovery = TerminalResponseRecovery()

    def init(api: ExtensionAPI) -> None:
        api.on(Event.TURN_START, recovery.turn_start)
        api.on(Event.ON_STEP_END, recovery.step_end)
        api.on(Event.AFTER_LLM_CALL, recovery.after_llm_call)

    return Extension(RECOVERY_ID, init, "asks once more when the answer after successful tools is empty")
