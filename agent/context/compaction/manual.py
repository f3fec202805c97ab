"""``/compact [instructions]`` (C11): a checkpoint on demand, only while the session is idle.

Always a checkpoint — no threshold, no archive stage. The system prompt and tools are assembled
fresh, as for a real turn, so the estimate and (in reuse mode) the cached prefix match what the
next turn will send. The user's instructions go JSON-escaped into the control message as data.
The outcome's annotations ride on the session's next model request. A successful manual
compaction also turns automatic compaction back on if the thrash guard had stopped it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...core.dispatch import observe
from ...core.events import ON_HISTORY_CHANGED, HistoryChanged
from ...core.spi import TurnContext
from .engine import CompactionInput, CompactionOutcome
from .history import prune_screenshots
from .outcome import annotations, auto_enabled, invalidate_anchor, record_outcome, set_auto

if TYPE_CHECKING:
    from .auto import ContextManager

SESSION_BUSY = "SESSION_BUSY"
HISTORY_CHANGED = "HISTORY_CHANGED"


async def compact_session(manager: ContextManager, session: Any, instructions: str | None) -> CompactionOutcome:
    rt = manager.runtime
    view = session.view
    turn = session.turn
    ctx = TurnContext(view, turn, "compact", "/compact")
    assembly = rt.registry.assemble(ctx, base_system_prompt=rt.system_prompt(), disabled=session.disabled)
    system, tools = assembly.system_prompt, assembly.specs()
    before = session.messages
    history, _ = prune_screenshots(before, manager.settings.keep_screenshots)
    fp = manager.footprint(view, system, tools, history)
    outcome = await manager.engine().run(CompactionInput(view, turn, 0, "manual", tuple(history), system, tools,
                                                         fp.tokens, instructions=instructions, allow_archive=False))
    if outcome.replaced and (session.busy or session.messages != before):
        # a turn started while the checkpoint was written: its history wins, the summary is dropped
        outcome = replace(outcome, status="failed", messages=None,
                          error=SESSION_BUSY if session.busy else HISTORY_CHANGED,
                          detail="the session changed while the checkpoint was being written")
    record_outcome(view, outcome, turn, 0)
    manager.queue_annotations(view.id, annotations(outcome))
    if outcome.replaced:
        await session.history.replace(outcome.messages, "compaction:manual")
        invalidate_anchor(view)
        # no turn is running, so the history has no observer wired: tell the extensions ourselves
        await observe(assembly.handlers_for(ON_HISTORY_CHANGED),
                      HistoryChanged(view, turn, "replace", tuple(outcome.messages or ()), session.history.epoch,
                                     "compaction:manual"), session.errors)
        if not auto_enabled(view):
            set_auto(view, True, None, turn=turn, step=0)
    return outcome
