"""Compactions the guard would not have run (docs/architecture.md, "Compaction never leaves a request to fail").

When the thrash guard has stopped automatic compaction and the request is over the provider's input
limit or byte limit, it is compacted anyway (trigger ``limit``, at most once per step), and a
provider "prompt too long" always goes through the overflow path (compact, then the loop retries),
even after a failure this turn. Each such decision is a ``compaction_forced`` event in the history
and a marker on the next request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ctxscope.vocab.kinds import MarkerKind

from ...core.events import Effects
from ...core.messages import Message
from ...core.model import ToolSpec
from ...core.state import SessionView
from .engine import CompactionEngine
from .events import record

log = logging.getLogger("ctxscope.agent.compaction")


def over_limit(
    engine: CompactionEngine, tokens: int, system: str, tools: Sequence[ToolSpec], messages: Sequence[Message]
) -> str | None:
    """Which provider limit the request exceeds: ``input_limit``, ``bytes`` or None."""
    if tokens > engine.lines.provider_input_limit:
        return "input_limit"
    if engine.body_bytes(system, tools, messages) > engine.byte_limit:
        return "bytes"
    return None


def record_forced(
    view: SessionView, turn: int, step: int, effects: Effects, *, why: str, over: str, tokens: int, limit: int
) -> None:
    """A compaction the guard would not have run: an event in the history and a marker on the next request."""
    log.warning(
        "session %s: compaction forced (over: %s, held back: %s): %d tokens, input limit %d",
        view.id,
        over,
        why,
        tokens,
        limit,
    )
    record(view, MarkerKind.COMPACTION_FORCED, why=why, over=over, tokens=tokens, limit=limit, turn=turn, step=step)
    effects.declare(MarkerKind.COMPACTION_FORCED, why=why, over=over, tokens=tokens, limit=limit)
