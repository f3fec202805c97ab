"""The runaway guard: a host builtin that notices the model circling within one turn.

It never blocks a tool and never ends a turn. At every step end it projects the step's tool calls
into per-turn HMAC fingerprints (``guard_projection``), updates consecutive counts
(``guard_signals``), reports observations at count 2, and at the reminder threshold sends at most
one reminder per turn as a steering user message, delivered before the next model request.

Configuration: the local settings (``runawayGuard`` in the host settings: ``enabled``,
``reminderThreshold``) are read once, when the guard is created; the override
(``<home>/runaway-guard.override.json`` in production, standing in for a remote setting) is
re-read at every judgement and wins. Verifier turns (source ``goal-verifier``/``verifier``) are
observed but never reminded. Three events: signal, reminder injected, turn summary — carrying
kinds, counts and fingerprint prefixes, never arguments or outputs.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxscope.vocab.kinds import MarkerKind

from ..core.events import Event, StepEnd, TurnEnd, TurnStart
from ..core.settings import HostOptions, host_settings
from ..core.spi import Extension, ExtensionAPI
from .policy import ToolPolicy, default_policies
from .projection import KEY_BYTES, Fingerprinter, project_step
from .reminder import reminder_text
from .signals import OBSERVE_AT, SignalTracker, choose_reminder, remind_threshold

log = logging.getLogger("ctxscope.agent.guard.extension")

GUARD_ID = "runaway-guard"
VERIFIER_SOURCES = frozenset({"goal-verifier", "verifier"})
EVENTS_FILE = "runaway-guard.jsonl"
OVERRIDE_FILE = "runaway-guard.override.json"


@dataclass(frozen=True)
class GuardConfig:
    enabled: bool = True
    reminder_threshold: int = 3


def _flag(value: object, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("false", "off", "0", "no"):
        return False
    if isinstance(value, str) and value.strip().lower() in ("true", "on", "1", "yes"):
        return True
    return default


def resolve_config(local: Mapping[str, Any] | None, override: Mapping[str, Any] | None) -> GuardConfig:
    """Override wins over local, key by key; the threshold never goes below 3."""
    merged = {**(local if isinstance(local, Mapping) else {}), **(override if isinstance(override, Mapping) else {})}
    return GuardConfig(_flag(merged.get("enabled"), True), remind_threshold(merged.get("reminderThreshold", 3)))


# --- events -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardSignalEvent:
    session_id: str
    turn: int
    step: int
    kind: str
    count: int
    key: str
    label: str | None = None
    name: str = "runaway_guard_signal"


@dataclass(frozen=True)
class GuardReminderEvent:
    session_id: str
    turn: int
    step: int
    kind: str
    count: int
    chars: int
    name: str = "runaway_guard_reminder_injected"


@dataclass(frozen=True)
class GuardTurnSummary:
    session_id: str
    turn: int
    steps_judged: int
    max_counts: dict[str, int]
    reminded: str | None
    reminder_step: int | None
    observe_only: bool
    name: str = "runaway_guard_turn_summary"


GuardEvent = GuardSignalEvent | GuardReminderEvent | GuardTurnSummary
Observer = Callable[[GuardEvent], None]


@dataclass
class _Turn:
    turn: int
    fp: Fingerprinter
    observe_only: bool
    tracker: SignalTracker = field(default_factory=SignalTracker)
    steps: int = 0
    max_counts: dict[str, int] = field(default_factory=dict)
    reminded: str | None = None
    reminder_step: int | None = None


def _best_effort(read: Callable[[], Any] | None) -> Any:
    if read is None:
        return None
    try:
        return read()
    except Exception:
        log.warning("runaway guard: reading a setting failed; ignored", exc_info=True)
        return None


class RunawayGuard:
    def __init__(
        self,
        *,
        policies: Mapping[str, ToolPolicy] | None = None,
        local_config: Mapping[str, Any] | None = None,
        read_override: Callable[[], Mapping[str, Any] | None] | None = None,
        read_verified_progress: Callable[[StepEnd], str | None] | None = None,
        should_remind: Callable[[TurnStart], bool] | None = None,
        on_signal: Observer | None = None,
        on_reminder: Observer | None = None,
        on_turn_summary: Observer | None = None,
        new_key: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
    ) -> None:
        self.policies = dict(default_policies() if policies is None else policies)
        self.local = dict(local_config or {})  # read once, by whoever created the guard
        self.read_override = read_override
        self.read_verified_progress = read_verified_progress
        self.should_remind = should_remind or (lambda e: e.source not in VERIFIER_SOURCES)
        self.on_signal, self.on_reminder, self.on_turn_summary = on_signal, on_reminder, on_turn_summary
        self.new_key = new_key
        self._turns: dict[str, _Turn] = {}

    def config(self) -> GuardConfig:
        return resolve_config(self.local, _best_effort(self.read_override))

    def _emit(self, observer: Observer | None, event: GuardEvent) -> None:
        log.debug("%s %s", event.name, event)
        if observer is not None:
            try:
                observer(event)
            except Exception:
                log.warning("runaway guard observer failed", exc_info=True)

    def turn_start(self, e: TurnStart) -> None:
        self._turns[e.session.id] = _Turn(e.turn, Fingerprinter(self.new_key()), not self.should_remind(e))

    def step_end(self, e: StepEnd) -> None:
        cfg = self.config()
        if not cfg.enabled:
            return
        t = self._turns.get(e.session.id)
        if t is None or t.turn != e.turn:  # enabled mid-turn: judge from here, observing only
            t = self._turns[e.session.id] = _Turn(e.turn, Fingerprinter(self.new_key()), True)
        view = project_step(t.fp, e.step, e.answer.tool_calls, e.results, self.policies)
        verified = None
        read = self.read_verified_progress
        if read is not None:
            verified = _best_effort(lambda: read(e))
        signals = t.tracker.observe(view, verified)
        t.steps += 1
        for s in signals:
            t.max_counts[s.kind] = max(t.max_counts.get(s.kind, 0), s.count)
            if s.count in (OBSERVE_AT, cfg.reminder_threshold):
                e.effects.declare(MarkerKind.GUARD_SIGNAL, kind=s.kind, count=s.count)
                self._emit(
                    self.on_signal, GuardSignalEvent(e.session.id, e.turn, e.step, s.kind, s.count, s.key, s.label)
                )
        choice = choose_reminder(signals, cfg.reminder_threshold)
        if choice is None or t.reminded is not None or t.observe_only:
            return
        text = reminder_text(choice)
        e.steer(text, kind="guard_reminder", hidden=True, signal=choice.kind, count=choice.count)
        e.effects.declare(MarkerKind.GUARD_REMINDER, signal=choice.kind, count=choice.count)
        t.reminded, t.reminder_step = choice.kind, e.step
        self._emit(
            self.on_reminder, GuardReminderEvent(e.session.id, e.turn, e.step, choice.kind, choice.count, len(text))
        )

    def turn_end(self, e: TurnEnd) -> None:
        t = self._turns.pop(e.session.id, None)
        if t is None or t.turn != e.turn or not t.steps:  # nothing judged (disabled, or no step ended)
            return
        self._emit(
            self.on_turn_summary,
            GuardTurnSummary(
                e.session.id, e.turn, t.steps, dict(t.max_counts), t.reminded, t.reminder_step, t.observe_only
            ),
        )


def runaway_guard_extension(guard: RunawayGuard) -> Extension:
    def init(api: ExtensionAPI) -> None:
        api.on(Event.TURN_START, guard.turn_start)
        api.on(Event.ON_STEP_END, guard.step_end)
        api.on(Event.TURN_END, guard.turn_end)

    return Extension(GUARD_ID, init, "notices the model circling within a turn and says so once")


# --- production wiring --------------------------------------------------------------------------------


def read_json_file(path: Path) -> Mapping[str, Any] | None:
    """The JSON object in ``path``; None when the file is absent."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


class SessionEventLog:
    """Appends guard events to ``<session dir>/runaway-guard.jsonl`` (best effort)."""

    def __init__(self, sessions_root: Path) -> None:
        self.root = sessions_root

    def __call__(self, event: GuardEvent) -> None:
        path = self.root / event.session_id / EVENTS_FILE
        if not path.parent.is_dir():
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event.name, **{k: v for k, v in asdict(event).items() if k != "name"}}) + "\n")


def create_runaway_guard(options: HostOptions) -> Extension:
    local = host_settings(options).get("runawayGuard")  # once, at creation
    override = options.home / OVERRIDE_FILE
    events = SessionEventLog(options.home / "sessions")
    guard = RunawayGuard(
        local_config=local if isinstance(local, Mapping) else None,
        read_override=lambda: read_json_file(override),
        on_signal=events,
        on_reminder=events,
        on_turn_summary=events,
    )
    return runaway_guard_extension(guard)
