"""``/compact [instructions]``: a checkpoint on demand, only while the session is idle.

Always a checkpoint — no threshold, no archive stage. The system prompt and tools are assembled
fresh, as for a real turn, so the estimate and (in reuse mode) the cached prefix match what the
next turn will send. The user's instructions go JSON-escaped into the control message as data.
The outcome's annotations ride on the session's next model request. The host runs it as the
maintenance command ``compact`` (core.events.MaintenanceContext), so it never touches the runtime. A successful manual
compaction also turns automatic compaction back on if the thrash guard had stopped it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ctxscope.vocab.kinds import CompactionTrigger

from ...core.events import MaintenanceContext
from .engine import CompactionInput, CompactionOutcome
from .history import prune_screenshots
from .outcome import auto_enabled, invalidate_anchor, record_outcome, request_effects, set_auto

if TYPE_CHECKING:
    from .auto import ContextManager

SESSION_BUSY = "SESSION_BUSY"
HISTORY_CHANGED = "HISTORY_CHANGED"


async def compact_session(
    manager: ContextManager, ctx: MaintenanceContext, instructions: str | None
) -> CompactionOutcome:
    view, turn = ctx.session, ctx.turn
    system, tools = ctx.system, ctx.tools
    before = ctx.history.messages
    history, _ = prune_screenshots(before, manager.settings.keep_screenshots)
    fp = manager.footprint(view, system, tools, history)
    outcome = await manager.engine().run(
        CompactionInput(
            view,
            turn,
            0,
            CompactionTrigger.MANUAL,
            tuple(history),
            system,
            tools,
            fp.tokens,
            instructions=instructions,
            allow_archive=False,
        )
    )
    if outcome.replaced and (ctx.busy() or ctx.history.messages != before):
        # a turn started while the checkpoint was written: its history wins, the summary is dropped
        outcome = replace(
            outcome,
            status="failed",
            messages=None,
            error=SESSION_BUSY if ctx.busy() else HISTORY_CHANGED,
            detail="the session changed while the checkpoint was being written",
        )
    record_outcome(view, outcome, turn, 0)
    manager.queue_effects(view.id, request_effects(outcome))
    if outcome.replaced:
        messages = tuple(outcome.messages or ())
        await ctx.history.replace(messages, "compaction:manual")
        invalidate_anchor(view)
        await ctx.history_changed("replace", messages, ctx.history.epoch, "compaction:manual")
        if not auto_enabled(view):
            set_auto(view, True, None, turn=turn, step=0)
    return outcome
