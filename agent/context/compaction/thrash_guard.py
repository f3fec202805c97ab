"""The anti-thrash guard: automatic compaction stops for a session before it fires on every turn.

A line-triggered automatic compaction must leave ``thrash_margin`` (20 %) of the trigger line free,
must not be predicted to fire again within the next turn (what this turn has added so far would
push it over again), and must not follow another one in the same or the previous turn. Otherwise
automatic compaction stops for the session, recorded and shown by /context; a manual /compact turns
it back on. A forced compaction (``forced.py``) is not the guard's to judge.
"""

from __future__ import annotations

import logging

from ctxscope.vocab.kinds import MarkerKind

from ...core.budget import ContextSettings
from ...core.events import Effects
from ...core.state import SessionView
from .engine import LINE_TRIGGERS, CompactionOutcome
from .outcome import compaction_state, set_auto

log = logging.getLogger("ctxscope.agent.compaction")


class ThrashGuard:
    """What each session's turn has grown by, and the verdict on each automatic compaction."""

    def __init__(self, settings: ContextSettings) -> None:
        self.settings = settings
        self._turn_start: dict[str, tuple[int, int]] = {}  # session -> (turn, footprint at its first request)

    def note_request(self, session_id: str, turn: int, tokens: int) -> None:
        """A request of ``turn`` measured ``tokens``: the first one of the turn is its starting point."""
        start = self._turn_start.get(session_id)
        if start is None or start[0] != turn:
            self._turn_start[session_id] = (turn, tokens)

    def judge(
        self, view: SessionView, outcome: CompactionOutcome, turn: int, step: int, effects: Effects, trigger_at: int
    ) -> None:
        """Stop automatic compaction for the session when it would thrash (see the module docstring)."""
        if outcome.trigger not in LINE_TRIGGERS:
            return
        after = outcome.tokens_after or 0
        start = self._turn_start.get(view.id)
        grown = max(0, outcome.tokens_before - start[1]) if start and start[0] == turn else 0
        state = compaction_state(view)
        recent = [t for t in state.get("auto_turns") or [] if isinstance(t, int)]
        reason = None
        if after > trigger_at * (1 - self.settings.thrash_margin):
            reason = (
                f"compaction left {after} tokens, less than {self.settings.thrash_margin:.0%} below the "
                f"trigger line ({trigger_at})"
            )
        elif after + grown > trigger_at:
            reason = (
                f"compaction left {after} tokens and this turn alone added {grown}: it would fire again "
                f"within the next turn (trigger line {trigger_at})"
            )
        elif recent and turn - recent[-1] <= 1:
            reason = f"automatic compaction fired at turn {recent[-1]} and again at turn {turn}"
        self._turn_start[view.id] = (turn, after)
        state["auto_turns"] = (recent + [turn])[-5:]
        view.state.set("compaction", state)
        if reason is not None:
            log.warning("session %s: automatic compaction stopped: %s", view.id, reason)
            set_auto(view, False, reason, turn=turn, step=step)
            effects.declare(MarkerKind.COMPACTION_STOPPED, by="guard", trigger=outcome.trigger)
