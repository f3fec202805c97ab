"""Automatic context management: the ``context-management`` host builtin and its anti-thrash guard.

Before every model request (host builtins run after configured extensions' hooks, and the
reminder builtins after this one): prune computer-use screenshots to the last two (this request
only), then measure the footprint (``core.estimate``) and compact when it is over the trigger line, when the
serialized body is over the provider's byte limit, or when an archive plan holds. A PreCompact
hook may defer or stop; the engine archives or checkpoints; a replacement becomes
``ReplaceHistory`` (a new epoch: the usage anchor is invalidated), ``POST_ADMISSION_FAILED``
aborts the turn, other failures are recorded and the request goes out uncompacted.

Everything goes through the SPI: a provider "prompt too long" reaches ``on_overflow`` (the SPI's
overflow handler), ``/compact`` is the maintenance command ``compact``, the PreCompact / PostCompact
hooks are the ``before_compact`` / ``after_compact`` events, and the model client and the live
history's epoch come from ``api.host``. A failed automatic compaction is not retried in the same
turn; a provider "prompt too long" still goes through the overflow path. The usage anchor is kept by
``usage_anchor.py``, the thrash guard is ``thrash_guard.py``'s, and a compaction the guard would not
have run is ``forced.py``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxscope.vocab.effects import Effect
from ctxscope.vocab.kinds import CompactionTrigger, MarkerKind

from ...core.budget import ContextSettings
from ...core.estimate import AnchorBinding, Footprint, UsageAnchor, footprint, prefix_hash
from ...core.events import (
    Abort,
    BeforeCompactHandler,
    Defer,
    Effects,
    Event,
    LlmCallContext,
    MaintenanceContext,
    ModifyRequest,
    OverflowContext,
    PostCompact,
    PreCompact,
    ReplaceHistory,
    StopAuto,
)
from ...core.messages import Message
from ...core.model import ToolSpec
from ...core.settings import HostOptions
from ...core.spi import AgentHost, Extension, ExtensionAPI
from ...core.state import SessionView
from ..settings import settings_from
from .archive import ArchivePlan, plan_archive
from .checkpoint import load_system_prompt
from .engine import CompactionEngine, CompactionInput, CompactionOutcome
from .events import CompactionHooks
from .forced import over_limit, record_forced
from .history import prune_screenshots
from .manual import compact_session
from .outcome import ANCHOR_KEY, auto_enabled, record_outcome, request_effects, set_auto
from .replace import POST_ADMISSION_FAILED
from .thrash_guard import ThrashGuard
from .usage_anchor import AnchorKeeper

log = logging.getLogger("ctxscope.agent.compaction")
EXTENSION_ID = "context-management"


class ContextManager:
    def __init__(
        self, settings: ContextSettings, *, home: Path | None = None, hooks: CompactionHooks | None = None
    ) -> None:
        self.settings = settings
        self.home = home
        self.hooks = hooks or CompactionHooks()
        self.host: AgentHost | None = None  # set when the extension is loaded (api.host)
        self.checkpoint_system = load_system_prompt(settings.checkpoint_system_prompt_file, home)
        self.anchor = AnchorKeeper(self.epoch)
        self.guard = ThrashGuard(settings)
        self._pending: dict[str, list[Effect]] = {}  # effects for a session's next request (after /compact)
        self._failed: dict[str, int] = {}  # session -> turn whose automatic compaction failed (no retry that turn)
        self._forced: dict[str, tuple[int, int]] = {}  # session -> (turn, step) of the last forced compaction

    # --- wiring ---------------------------------------------------------------------------------------
    def extension(self) -> Extension:
        """This manager as the ``context-management`` extension: handlers, overflow handler and /compact."""

        def init(api: ExtensionAPI) -> None:
            self.host = api.host
            api.on(Event.BEFORE_LLM_CALL, self.before_llm_call)
            api.on(Event.ON_LLM_CALL_PREPARED, self.anchor.on_prepared)
            api.on(Event.AFTER_LLM_CALL, self.anchor.after_llm_call)
            api.on(Event.ON_HISTORY_CHANGED, self.anchor.on_history_changed)
            api.on_overflow(self.on_overflow)
            api.register_command("compact", self.compact)

        return Extension(EXTENSION_ID, init, "automatic compaction, usage anchor, screenshot pruning")

    def _host(self) -> AgentHost:
        if self.host is None:
            raise RuntimeError("context management is not loaded by a host")
        return self.host

    def engine(self) -> CompactionEngine:
        host = self._host()
        info = host.model_info()
        return CompactionEngine(
            host.client,
            self.settings,
            checkpoint_system=self.checkpoint_system,
            window=info.context_window,
            model_output=info.max_output_tokens,
        )

    def epoch(self, session_id: str) -> int | None:
        """The live history's epoch (the session is open whenever a request is being prepared)."""
        return self.host.history_epoch(session_id) if self.host is not None else None

    def binding(self, system: str, tools: Sequence[ToolSpec]) -> AnchorBinding:
        c = self._host().client
        return AnchorBinding(c.provider, c.api, c.model, prefix_hash(system, tools))

    def footprint(
        self, view: SessionView, system: str, tools: Sequence[ToolSpec], messages: Sequence[Message]
    ) -> Footprint:
        anchor = UsageAnchor.from_dict(view.state.get(ANCHOR_KEY))
        return footprint(system, tools, messages, anchor, self.binding(system, tools), self.epoch(view.id))

    def queue_effects(self, session_id: str, effects: list[Effect]) -> None:
        self._pending.setdefault(session_id, []).extend(effects)

    # --- step handlers --------------------------------------------------------------------------------
    async def before_llm_call(self, ctx: LlmCallContext) -> ModifyRequest | ReplaceHistory | Abort | None:
        view = ctx.session
        ctx.effects.declare_all(self._pending.pop(view.id, []))
        request, dropped = prune_screenshots(ctx.request_messages, self.settings.keep_screenshots)
        passthrough = ModifyRequest(messages=tuple(request)) if dropped else None
        if self.host is None or not self.settings.auto_compact or self._failed.get(view.id) == ctx.turn:
            return passthrough  # a failed compaction is not retried this turn: the provider's overflow path remains
        engine = self.engine()
        fp = self.footprint(view, ctx.system, ctx.tools, request)
        if not auto_enabled(view):
            # the thrash guard holds automatic compaction back, but never at the price of a request that cannot
            # fit (docs/architecture.md, "Compaction never leaves a request to fail")
            over = over_limit(engine, fp.tokens, ctx.system, ctx.tools, request)
            if over is None or self._forced.get(view.id) == (ctx.turn, ctx.step):
                return passthrough
            self._forced[view.id] = (ctx.turn, ctx.step)
            record_forced(
                view,
                ctx.turn,
                ctx.step,
                ctx.effects,
                why="auto_off",
                over=over,
                tokens=fp.tokens,
                limit=engine.lines.provider_input_limit,
            )
            history, _ = prune_screenshots(ctx.history, self.settings.keep_screenshots)
            outcome = await self._auto(
                view,
                ctx.turn,
                ctx.step,
                CompactionTrigger.LIMIT,
                tuple(history),
                ctx.system,
                ctx.tools,
                fp.tokens,
                ctx.effects,
                None,
                engine,
            )
            return self._verdict(outcome, passthrough)
        self.guard.note_request(view.id, ctx.turn, fp.tokens)
        history, _ = prune_screenshots(ctx.history, self.settings.keep_screenshots)
        plan: ArchivePlan | None = None
        if fp.tokens > engine.lines.automatic_trigger_at:
            trigger = CompactionTrigger.THRESHOLD
        elif engine.body_bytes(ctx.system, ctx.tools, request) > engine.byte_limit:
            trigger = CompactionTrigger.BYTES
        else:
            plan = plan_archive(history, self.settings)
            if not plan.holds:
                return passthrough
            trigger = CompactionTrigger.ARCHIVE_PLAN
        outcome = await self._auto(
            view,
            ctx.turn,
            ctx.step,
            trigger,
            tuple(history),
            ctx.system,
            ctx.tools,
            fp.tokens,
            ctx.effects,
            plan,
            engine,
        )
        return self._verdict(outcome, passthrough)

    @staticmethod
    def _verdict(
        outcome: CompactionOutcome | None, passthrough: ModifyRequest | None
    ) -> ModifyRequest | ReplaceHistory | Abort | None:
        if outcome is None:
            return passthrough
        if outcome.replaced:
            return ReplaceHistory(tuple(outcome.messages or ()), f"compaction:{outcome.stage}")
        if outcome.error == POST_ADMISSION_FAILED:
            return Abort(f"{POST_ADMISSION_FAILED}: {outcome.detail}")
        return passthrough

    def _held_back(self, view: SessionView, turn: int) -> str:
        """Why automatic compaction would not have run now, for the record (``none``: it would have)."""
        if not auto_enabled(view):
            return "auto_off"
        if self._failed.get(view.id) == turn:
            return "failed_this_turn"
        return "none"

    async def on_overflow(self, octx: OverflowContext) -> bool:
        """The provider refused the prompt as too long: compact (archive or ladder) and let the loop retry,
        whatever the thrash guard said (docs/architecture.md, "Compaction never leaves a request to fail")."""
        view = octx.session
        if self.host is None:
            return False
        history, _ = prune_screenshots(octx.history.messages, self.settings.keep_screenshots)
        fp = self.footprint(view, octx.system, octx.tools, history)
        engine = self.engine()
        record_forced(
            view,
            octx.turn,
            octx.step,
            octx.effects,
            why=self._held_back(view, octx.turn),
            over="provider",
            tokens=fp.tokens,
            limit=engine.lines.provider_input_limit,
        )
        outcome = await self._auto(
            view,
            octx.turn,
            octx.step,
            CompactionTrigger.OVERFLOW,
            tuple(history),
            octx.system,
            octx.tools,
            fp.tokens,
            octx.effects,
            None,
            engine,
        )
        if outcome is None or not outcome.replaced:
            return False
        await octx.history.replace(tuple(outcome.messages or ()), f"compaction:{outcome.stage}")
        return True

    async def _auto(
        self,
        view: SessionView,
        turn: int,
        step: int,
        trigger: CompactionTrigger,
        history: tuple[Message, ...],
        system: str,
        tools: Sequence[ToolSpec],
        tokens: int,
        effects: Effects,
        plan: ArchivePlan | None,
        engine: CompactionEngine,
    ) -> CompactionOutcome | None:
        pre = PreCompact(
            view, turn, step, trigger, tokens, engine.lines.automatic_trigger_at, engine.lines.provider_input_limit
        )
        verdict = await self.hooks.run_pre(pre) or await self._host().before_compact(pre)
        if isinstance(verdict, StopAuto):
            set_auto(view, False, verdict.reason, turn=turn, step=step)
            effects.declare(MarkerKind.COMPACTION_STOPPED, by="hook", trigger=trigger)
            return None
        if isinstance(verdict, Defer):
            effects.declare(MarkerKind.COMPACTION_DEFERRED, by="hook", trigger=trigger)
            return None
        outcome = await engine.run(
            CompactionInput(view, turn, step, trigger, history, system, tuple(tools), tokens, plan=plan)
        )
        record_outcome(view, outcome, turn, step)
        effects.declare_all(request_effects(outcome))
        if not outcome.replaced:  # a failed checkpoint costs a model call: do not repeat it on every step of this turn
            self._failed[view.id] = turn
        elif auto_enabled(view) and trigger != CompactionTrigger.LIMIT:  # a forced one is not the guard's to judge
            self.guard.judge(view, outcome, turn, step, effects, engine.lines.automatic_trigger_at)
        post = PostCompact(
            view,
            turn,
            trigger,
            outcome.stage,
            outcome.status,
            outcome.error,
            outcome.tokens_before,
            outcome.tokens_after,
        )
        await self.hooks.run_post(post)
        await self._host().after_compact(post)
        return outcome

    async def compact(self, ctx: MaintenanceContext, instructions: str | None) -> CompactionOutcome:
        """The ``compact`` maintenance command (/compact)."""
        return await compact_session(self, ctx, instructions)


def compaction_hook_extension(
    extension_id: str,
    *,
    pre: BeforeCompactHandler | None = None,
    post: Callable[[PostCompact], object] | None = None,
    init: Callable[[ExtensionAPI], None] | None = None,
    description: str = "",
) -> Extension:
    """A configured extension with PreCompact / PostCompact hooks (before_compact / after_compact handlers),
    honoured while it is enabled in the session."""

    def setup(api: ExtensionAPI) -> None:
        if pre is not None:
            api.on(Event.BEFORE_COMPACT, pre)
        if post is not None:
            api.on(Event.AFTER_COMPACT, post)
        if init is not None:
            init(api)

    return Extension(extension_id, setup, description or "compaction hooks")


def create_context_management(options: HostOptions) -> Extension:
    """The host builtin's factory."""
    return context_management_extension(options)


def context_management_extension(
    options: HostOptions | None = None, *, settings: ContextSettings | None = None, hooks: CompactionHooks | None = None
) -> Extension:
    """The host builtin; ``options`` is the runtime's HostOptions, ``settings`` override what they say."""
    return context_manager(options, settings=settings, hooks=hooks).extension()


def context_manager(
    options: HostOptions | None = None, *, settings: ContextSettings | None = None, hooks: CompactionHooks | None = None
) -> ContextManager:
    """The manager behind the builtin (tests and benches keep it to look inside)."""
    if settings is None:
        settings = settings_from(options)
    return ContextManager(settings, home=options.home if options is not None else None, hooks=hooks)
