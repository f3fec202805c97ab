"""Automatic context management: the ``context-management`` host builtin (C5) and its anti-thrash guard.

Before every model request (host builtins run after configured extensions' hooks, and the
reminder builtins after this one): prune computer-use screenshots to the last two (this request
only), then measure the footprint (C4) and compact when it is over the trigger line, when the
serialized body is over the provider's byte limit, or when an archive plan holds. A PreCompact
hook may defer or stop; the engine archives or checkpoints; a replacement becomes
``ReplaceHistory`` (a new epoch: the usage anchor is invalidated), ``POST_ADMISSION_FAILED``
aborts the turn, other failures are recorded and the request goes out uncompacted.

The usage anchor is kept here: ``on_llm_call_prepared`` notes what the request was bound to,
``after_llm_call`` records the answer's usage, ``on_history_changed`` drops it on replacement.
A provider "prompt too long" reaches ``on_overflow`` (the runtime's overflow handler).

No thrashing: a line-triggered automatic compaction must leave ``thrash_margin`` (20 %) of the
trigger line free, must not be predicted to fire again within the next turn (what this turn has
added so far would push it over again), and must not follow another one in the same or the
previous turn. Otherwise automatic compaction stops for the session, recorded and shown by
/context; a manual /compact turns it back on. A failed automatic compaction is not retried in the
same turn (the provider's overflow error still gets its chance).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.budget import ContextSettings
from ...core.estimate import AnchorBinding, Footprint, UsageAnchor, footprint, prefix_hash
from ...core.events import (
    AFTER_LLM_CALL,
    BEFORE_LLM_CALL,
    ON_HISTORY_CHANGED,
    ON_LLM_CALL_PREPARED,
    Abort,
    Effects,
    HistoryChanged,
    LlmCallContext,
    LlmCallPrepared,
    LlmCallResult,
    ModifyRequest,
    OverflowContext,
    ReplaceHistory,
)
from ...core.messages import Message
from ...core.model import ToolSpec
from ...core.spi import Extension, ExtensionAPI
from ...core.state import SessionView
from ..settings import settings_from
from .archive import ArchivePlan, plan_archive
from .checkpoint import load_system_prompt
from .engine import LINE_TRIGGERS, CompactionEngine, CompactionInput, CompactionOutcome
from .events import (
    COMPACTION_DEFERRED,
    COMPACTION_STOPPED,
    CompactionHooks,
    Defer,
    PostCompact,
    PostCompactHook,
    PreCompact,
    PreCompactHook,
    StopAuto,
    event_value,
)
from .history import prune_screenshots
from .outcome import (
    ANCHOR_KEY,
    annotations,
    auto_enabled,
    compaction_state,
    invalidate_anchor,
    record_outcome,
    set_auto,
)
from .replace import POST_ADMISSION_FAILED

log = logging.getLogger("ctxscope.agent.compaction")
EXTENSION_ID = "context-management"
_MANAGERS: weakref.WeakKeyDictionary[Any, ContextManager] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class AttachingExtension(Extension):
    """A host builtin that also plugs into the runtime once it exists (overflow handler, /compact)."""

    attach: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)


def manager_for(runtime: Any) -> ContextManager | None:
    return _MANAGERS.get(runtime)


class ContextManager:
    def __init__(self, settings: ContextSettings, *, home: Any = None, hooks: CompactionHooks | None = None) -> None:
        self.settings = settings
        self.home = home
        self.hooks = hooks or CompactionHooks()
        self.runtime: Any = None
        self.checkpoint_system = load_system_prompt(settings.checkpoint_system_prompt_file, home)
        self._bindings: dict[str, tuple[AnchorBinding, int | None]] = {}
        self._pending: dict[str, list[str]] = {}  # annotations for a session's next request (after /compact)
        self._turn_start: dict[str, tuple[int, int]] = {}  # session -> (turn, footprint at its first request)
        self._failed: dict[str, int] = {}  # session -> turn whose automatic compaction failed (no retry that turn)

    # --- wiring ---------------------------------------------------------------------------------------
    def attach(self, runtime: Any) -> None:
        self.runtime = runtime
        _MANAGERS[runtime] = self
        if runtime.overflow_handler is None:
            runtime.overflow_handler = self.on_overflow
        from .manual import compact_session

        runtime.conversation.maintenance.set_compactor(lambda session, instructions:
                                                       compact_session(self, session, instructions))

    def engine(self) -> CompactionEngine:
        info = self.runtime.model_info()
        return CompactionEngine(self.runtime.client, self.settings, checkpoint_system=self.checkpoint_system,
                                window=info.context_window, model_output=info.max_output_tokens)

    def epoch(self, session_id: str) -> int | None:
        """The live history's epoch (the session is open whenever a request is being prepared)."""
        if self.runtime is None:
            return None
        try:
            return self.runtime.open_session(session_id).history.epoch
        except KeyError:  # SessionNotFound: a session view without a stored session (tests, embedders)
            return None

    def binding(self, system: str, tools: Sequence[ToolSpec]) -> AnchorBinding:
        c = self.runtime.client
        return AnchorBinding(c.provider, c.api, c.model, prefix_hash(system, tools))

    def footprint(self, view: SessionView, system: str, tools: Sequence[ToolSpec],
                  messages: Sequence[Message]) -> Footprint:
        anchor = UsageAnchor.from_dict(view.state.get(ANCHOR_KEY))
        return footprint(system, tools, messages, anchor, self.binding(system, tools), self.epoch(view.id))

    def queue_annotations(self, session_id: str, values: list[str]) -> None:
        self._pending.setdefault(session_id, []).extend(values)

    # --- step handlers --------------------------------------------------------------------------------
    async def before_llm_call(self, ctx: LlmCallContext) -> ModifyRequest | ReplaceHistory | Abort | None:
        view = ctx.session
        for value in self._pending.pop(view.id, []):
            ctx.effects.declare(value)
        request, dropped = prune_screenshots(ctx.request_messages, self.settings.keep_screenshots)
        passthrough = ModifyRequest(messages=tuple(request)) if dropped else None
        if (self.runtime is None or not self.settings.auto_compact or not auto_enabled(view)
                or self._failed.get(view.id) == ctx.turn):
            return passthrough
        engine = self.engine()
        fp = self.footprint(view, ctx.system, ctx.tools, request)
        start = self._turn_start.get(view.id)
        if start is None or start[0] != ctx.turn:
            self._turn_start[view.id] = (ctx.turn, fp.tokens)
        history, _ = prune_screenshots(ctx.history, self.settings.keep_screenshots)
        plan: ArchivePlan | None = None
        if fp.tokens > engine.lines.automatic_trigger_at:
            trigger = "threshold"
        elif engine.body_bytes(ctx.system, ctx.tools, request) > engine.byte_limit:
            trigger = "bytes"
        else:
            plan = plan_archive(history, self.settings)
            if not plan.holds:
                return passthrough
            trigger = "archive_plan"
        outcome = await self._auto(view, ctx.turn, ctx.step, trigger, tuple(history), ctx.system, ctx.tools,
                                   fp.tokens, ctx.effects, plan, engine)
        if outcome is None:
            return passthrough
        if outcome.replaced:
            return ReplaceHistory(tuple(outcome.messages or ()), f"compaction:{outcome.stage}")
        if outcome.error == POST_ADMISSION_FAILED:
            return Abort(f"{POST_ADMISSION_FAILED}: {outcome.detail}")
        return passthrough

    async def on_overflow(self, octx: OverflowContext) -> bool:
        """The provider refused the prompt as too long: compact (archive or ladder) and let the loop retry."""
        view = octx.session
        if self.runtime is None or not auto_enabled(view):
            return False
        history, _ = prune_screenshots(octx.history.messages, self.settings.keep_screenshots)
        fp = self.footprint(view, octx.system, octx.tools, history)
        outcome = await self._auto(view, octx.turn, octx.step, "overflow", tuple(history), octx.system, octx.tools,
                                   fp.tokens, octx.effects, None, self.engine())
        if outcome is None or not outcome.replaced:
            return False
        await octx.history.replace(tuple(outcome.messages or ()), f"compaction:{outcome.stage}")
        return True

    async def _auto(self, view: SessionView, turn: int, step: int, trigger: str, history: tuple[Message, ...],
                    system: str, tools: Sequence[ToolSpec], tokens: int, effects: Effects,
                    plan: ArchivePlan | None, engine: CompactionEngine) -> CompactionOutcome | None:
        verdict = await self.hooks.run_pre(PreCompact(view, turn, step, trigger, tokens,
                                                      engine.lines.automatic_trigger_at,
                                                      engine.lines.provider_input_limit))
        if isinstance(verdict, StopAuto):
            set_auto(view, False, verdict.reason, turn=turn, step=step)
            effects.declare(event_value(COMPACTION_STOPPED, by="hook", trigger=trigger))
            return None
        if isinstance(verdict, Defer):
            effects.declare(event_value(COMPACTION_DEFERRED, by="hook", trigger=trigger))
            return None
        outcome = await engine.run(CompactionInput(view, turn, step, trigger, history, system, tuple(tools), tokens,
                                                   plan=plan))
        record_outcome(view, outcome, turn, step)
        for value in annotations(outcome):
            effects.declare(value)
        if outcome.replaced:
            self._guard(view, outcome, turn, step, effects, engine)
        else:  # a failed checkpoint costs a model call: do not repeat it on every step of this turn
            self._failed[view.id] = turn
        await self.hooks.run_post(PostCompact(view, turn, trigger, outcome.stage, outcome.status, outcome.error,
                                              outcome.tokens_before, outcome.tokens_after))
        return outcome

    def _guard(self, view: SessionView, outcome: CompactionOutcome, turn: int, step: int, effects: Effects,
               engine: CompactionEngine) -> None:
        """Stop automatic compaction for the session when it would thrash (see the module docstring)."""
        if outcome.trigger not in LINE_TRIGGERS:
            return
        trigger_at = engine.lines.automatic_trigger_at
        after = outcome.tokens_after or 0
        start = self._turn_start.get(view.id)
        grown = max(0, outcome.tokens_before - start[1]) if start and start[0] == turn else 0
        state = compaction_state(view)
        recent = [t for t in state.get("auto_turns") or [] if isinstance(t, int)]
        reason = None
        if after > trigger_at * (1 - self.settings.thrash_margin):
            reason = (f"compaction left {after} tokens, less than {self.settings.thrash_margin:.0%} below the "
                      f"trigger line ({trigger_at})")
        elif after + grown > trigger_at:
            reason = (f"compaction left {after} tokens and this turn alone added {grown}: it would fire again "
                      f"within the next turn (trigger line {trigger_at})")
        elif recent and turn - recent[-1] <= 1:
            reason = f"automatic compaction fired at turn {recent[-1]} and again at turn {turn}"
        self._turn_start[view.id] = (turn, after)
        state["auto_turns"] = (recent + [turn])[-5:]
        view.state.set("compaction", state)
        if reason is not None:
            log.warning("session %s: automatic compaction stopped: %s", view.id, reason)
            set_auto(view, False, reason, turn=turn, step=step)
            effects.declare(event_value(COMPACTION_STOPPED, by="guard", trigger=outcome.trigger))

    # --- the usage anchor ------------------------------------------------------------------------------
    def on_prepared(self, ev: LlmCallPrepared) -> None:
        call = ev.call
        binding = AnchorBinding(call.provider, call.api, call.model, prefix_hash(call.request.system,
                                                                                 call.request.tools))
        self._bindings[ev.session.id] = (binding, self.epoch(ev.session.id))

    def after_llm_call(self, ev: LlmCallResult) -> None:
        bound = self._bindings.pop(ev.session.id, None)
        usage = ev.response.usage
        if bound is None or usage is None or usage.input_tokens <= 0:
            return None
        anchor = UsageAnchor(bound[0], bound[1], ev.response.message.id, usage.input_tokens, usage.output_tokens,
                             usage.cache_read_tokens, usage.cache_write_tokens, time.time())
        ev.session.state.set(ANCHOR_KEY, anchor.to_dict())
        return None

    def on_history_changed(self, ev: HistoryChanged) -> None:
        if ev.kind == "replace":  # a new epoch: the old usage describes a history that is gone
            invalidate_anchor(ev.session)


def compaction_hook_extension(extension_id: str, *, pre: PreCompactHook | None = None,
                              post: PostCompactHook | None = None, init: Callable[[ExtensionAPI], None] | None = None,
                              description: str = "") -> AttachingExtension:
    """A configured extension with PreCompact / PostCompact hooks, honoured while it is enabled in the session."""
    def attach(runtime: Any) -> None:
        manager = manager_for(runtime)
        if manager is None:
            return

        def enabled(view: SessionView) -> bool:
            return extension_id not in runtime.open_session(view.id).disabled

        if pre is not None:
            manager.hooks.pre.append(lambda ev: pre(ev) if enabled(ev.session) else None)
        if post is not None:
            manager.hooks.post.append(lambda ev: post(ev) if enabled(ev.session) else None)

    return AttachingExtension(extension_id, init or (lambda api: None), description or "compaction hooks",
                              attach=attach)


def create_context_management(options: Any) -> AttachingExtension:
    """The HOST_BUILTIN_FACTORIES entry."""
    return context_management_extension(options)


def context_management_extension(options: Any = None, *, settings: ContextSettings | None = None,
                                 hooks: CompactionHooks | None = None) -> AttachingExtension:
    """The host builtin; ``options`` is the runtime's HostOptions, ``settings`` override what they say."""
    if settings is None:
        settings = settings_from(options)
    manager = ContextManager(settings, home=getattr(options, "home", None), hooks=hooks)

    def init(api: ExtensionAPI) -> None:
        api.on(BEFORE_LLM_CALL, manager.before_llm_call)
        api.on(ON_LLM_CALL_PREPARED, manager.on_prepared)
        api.on(AFTER_LLM_CALL, manager.after_llm_call)
        api.on(ON_HISTORY_CHANGED, manager.on_history_changed)

    return AttachingExtension(EXTENSION_ID, init, "automatic compaction, usage anchor, screenshot pruning",
                              attach=manager.attach)
