"""Annotation headers on every model request: which session, turn and step it belongs to, and which
declared effects (compaction, reminder, guard, externalised output, retry, steer) shaped it.

The proxy strips every ``x-ctxscope-*`` header before forwarding and records them, so the inspector
shows our agent's effects exactly instead of guessing. Names are lowercase (HTTP/2 style).
"""

from __future__ import annotations

from collections.abc import Iterable

SESSION = "x-ctxscope-session"
TURN = "x-ctxscope-turn"
STEP = "x-ctxscope-step"
EVENT = "x-ctxscope-event"  # comma-separated effect names, e.g. "reminder, compaction"
ATTEMPT = "x-ctxscope-attempt"  # set by the HTTP client on retries (2, 3, ...)


def annotation_headers(session_id: str, turn: int, step: int, effects: Iterable[str] = ()) -> dict[str, str]:
    headers = {SESSION: session_id, TURN: str(turn), STEP: str(step)}
    effects = list(dict.fromkeys(effects))
    if effects:
        headers[EVENT] = ", ".join(effects)
    return headers
