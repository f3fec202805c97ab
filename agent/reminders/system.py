"""System reminders: a registry of providers and the service that builds one block per round.

Every turn is one *round*. ``build_reminder`` increments the session's round counter, collects
the data providers need (``ReminderData``), runs the providers in registration order and joins
their non-empty outputs into exactly one ``<system-reminder>`` block (or "" when nobody has
anything to say). For a model listed in ``disableSystemReminderModels`` only the *critical*
providers run (pending notices, open todos): switching reminders off for a model must not hide
what the user or the host still needs the model to see.

Bookkeeping lives in session state under ``reminders`` (round, the round each provider last
spoke, whether the next round must repeat the full agent context, and the last built turn and its
block), so it survives a resume, a restart and a compaction. Building is idempotent per turn, in
the persisted state: asking again for the same turn returns the same block without counting a
second round. A turn assembled for ``/context`` or ``/compact`` (``TurnContext.maintenance``) only
previews the next round's block: no round is counted and no notice is taken as delivered
(docs/architecture.md, "Reminder rounds survive restarts").
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from ..core.assembly import CLOSE, OPEN, validate_reminder
from ..core.spi import TurnContext
from ..core.state import SessionState

log = logging.getLogger("ctxscope.agent.reminders.system")

STATE_KEY = "reminders"
NOTICES_KEY = "pending_notices"
AGENT_NAME = "ctxscope-agent"


@dataclass(frozen=True)
class ReminderData:
    """What providers may read; collected once per round."""

    round: int
    turn: int
    source: str
    session_id: str
    agent_name: str
    workspace: str
    provider: str
    api: str
    model: str
    context_window: int
    today: str
    full_context: bool  # first round, or the history was replaced since the last full block
    todos: tuple[dict[str, Any], ...]
    notices: tuple[dict[str, Any], ...]
    last_spoke: dict[str, int] = field(default_factory=dict)  # provider name -> round it last produced text

    def rounds_since(self, provider: str) -> int | None:
        """Rounds since ``provider`` last produced text (None: never)."""
        last = self.last_spoke.get(provider)
        return None if last is None else self.round - last


Render = Callable[[ReminderData], "str | None"]
OnDelivered = Callable[[SessionState, ReminderData], None]


@dataclass(frozen=True)
class ReminderProvider:
    name: str
    render: Render
    critical: bool = False
    on_delivered: OnDelivered | None = None  # e.g. drop delivered notices


class ReminderRegistry:
    """Providers in registration order; ``append_critical`` marks those that run even when reminders are off."""

    def __init__(self) -> None:
        self._providers: list[ReminderProvider] = []

    def _add(self, provider: ReminderProvider) -> None:
        if any(p.name == provider.name for p in self._providers):
            raise ValueError(f"reminder provider {provider.name!r} is registered twice")
        self._providers.append(provider)

    def append(self, name: str, render: Render, *, on_delivered: OnDelivered | None = None) -> None:
        self._add(ReminderProvider(name, render, False, on_delivered))

    def append_critical(self, name: str, render: Render, *, on_delivered: OnDelivered | None = None) -> None:
        self._add(ReminderProvider(name, render, True, on_delivered))

    @property
    def providers(self) -> tuple[ReminderProvider, ...]:
        return tuple(self._providers)


def model_disabled(model: str, patterns: Iterable[str]) -> bool:
    """True when ``model`` matches one of ``disableSystemReminderModels`` (exact names or globs)."""
    return any(model == p or fnmatch.fnmatchcase(model, p) for p in patterns if p)


def queue_notice(state: SessionState, text: str, source: str = "host") -> None:
    """Queue a session notice for the next round's reminder (delivered once)."""
    notices = list(state.get(NOTICES_KEY) or [])
    notices.append({"text": text, "source": source})
    state.set(NOTICES_KEY, notices)


def set_full_context_due(state: SessionState, due: bool) -> None:
    """``True`` after a compaction (the earlier full agent context is gone); ``False`` once it was shown again."""
    book = dict(state.get(STATE_KEY) or {})
    if bool(book.get("full_context_due")) != due:
        book["full_context_due"] = due
        state.set(STATE_KEY, book)


def join_blocks(parts: Iterable[str]) -> str:
    """One block holding every non-empty part; "" when there is none."""
    body = "\n\n".join(p.strip() for p in parts if p and p.strip())
    return f"{OPEN}\n{body}\n{CLOSE}" if body else ""


class SystemReminderService:
    """Builds the round's reminder block for one session at a time (state is per session)."""

    def __init__(
        self,
        registry: ReminderRegistry,
        *,
        disabled_models: Iterable[str] = (),
        today: Callable[[], str] = lambda: date.today().isoformat(),
    ) -> None:
        self.registry = registry
        self.disabled_models = tuple(disabled_models)
        self._today = today

    def collect(self, ctx: TurnContext, round_no: int, book: dict[str, Any]) -> ReminderData:
        s = ctx.session
        full = round_no == 1 or bool(book.get("full_context_due"))
        return ReminderData(
            round=round_no,
            turn=ctx.turn,
            source=ctx.source,
            session_id=s.id,
            agent_name=AGENT_NAME,
            workspace=str(s.workspace),
            provider=s.model.provider,
            api=s.model.api,
            model=s.model.model,
            context_window=s.model.context_window,
            today=self._today(),
            full_context=full,
            todos=tuple(s.state.get("todos") or ()),
            notices=tuple(s.state.get(NOTICES_KEY) or ()),
            last_spoke=dict(book.get("last_spoke") or {}),
        )

    def build_reminder(self, ctx: TurnContext) -> str:
        """The round's block ("" when empty); counts one round per turn, none for a maintenance preview."""
        state = ctx.session.state
        book = dict(state.get(STATE_KEY) or {})
        built = book.get("built")
        if not ctx.maintenance and isinstance(built, dict) and built.get("turn") == ctx.turn:
            return str(built.get("block") or "")
        round_no = int(book.get("round") or 0) + 1
        data = self.collect(ctx, round_no, book)
        only_critical = model_disabled(data.model, self.disabled_models)
        parts: list[str] = []
        spoke = dict(data.last_spoke)
        delivered: list[ReminderProvider] = []
        for provider in self.registry.providers:
            if only_critical and not provider.critical:
                continue
            try:
                text = provider.render(data)
            except Exception:
                log.warning("reminder provider %s failed; skipped", provider.name, exc_info=True)
                continue
            if not text or not text.strip():
                continue
            if OPEN in text or CLOSE in text:  # a provider writes a body, never its own block
                log.warning("reminder provider %s wrote a %s tag; skipped", provider.name, OPEN)
                continue
            parts.append(text)
            spoke[provider.name] = round_no
            delivered.append(provider)
        block = validate_reminder(join_blocks(parts), origin="system reminder")
        if ctx.maintenance:  # a preview of the next round: nothing counted, nothing delivered
            return block
        # full_context_due is cleared by whoever shows it
        book.update(round=round_no, last_spoke=spoke, built={"turn": ctx.turn, "block": block})
        state.set(STATE_KEY, book)
        for provider in delivered:
            if provider.on_delivered is not None:
                try:
                    provider.on_delivered(state, data)
                except Exception:
                    log.warning("reminder provider %s: on_delivered failed", provider.name, exc_info=True)
        return block
