"""Reminders as host builtins on the ordinary SPI: the round's block and in-turn reminders.

``system-reminders`` contributes the round's block through ``register_reminder_provider`` with the
lowest priority, so it follows every extension reminder in the turn's user message
(docs/architecture.md, "User message assembly"). It lives in that message, which is appended at
the end of the conversation, so earlier turns' cached prefix is untouched. ``in-turn-reminders``
adds the deadline (request only) and the cadence reminders (appended hidden) before model requests.

Settings (read once, at creation): ``contextManagement.disableSystemReminderModels`` (model names
or globs; only critical providers run for them), ``contextManagement.turnDeadlineSeconds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.events import Event, HistoryChanged
from ..core.settings import HostOptions, host_settings
from ..core.spi import Extension, ExtensionAPI
from .inturn import InTurnReminders
from .providers import default_registry
from .system import ReminderRegistry, SystemReminderService, set_full_context_due

SYSTEM_REMINDERS_ID = "system-reminders"
IN_TURN_REMINDERS_ID = "in-turn-reminders"
HOST_REMINDER_PRIORITY = -1_000_000  # after every extension reminder: host blocks come last


def _context_settings(settings: Mapping[str, Any]) -> Mapping[str, Any]:
    value = settings.get("contextManagement") or {}
    return value if isinstance(value, Mapping) else {}


def system_reminders_extension(service: SystemReminderService) -> Extension:
    def replaced(e: HistoryChanged) -> None:
        if e.kind == "replace":
            set_full_context_due(e.session.state, True)

    def init(api: ExtensionAPI) -> None:
        api.register_reminder_provider(service.build_reminder, priority=HOST_REMINDER_PRIORITY)
        api.on(Event.ON_HISTORY_CHANGED, replaced)

    return Extension(SYSTEM_REMINDERS_ID, init, "one <system-reminder> block per round: agent context, todos, notices")


def in_turn_reminders_extension(reminders: InTurnReminders) -> Extension:
    def init(api: ExtensionAPI) -> None:
        api.on(Event.TURN_START, reminders.turn_start)
        api.on(Event.ON_STEP_END, reminders.step_end)
        api.on(Event.BEFORE_LLM_CALL, reminders.deadline)
        api.on(Event.BEFORE_LLM_CALL, reminders.cadence, appends=True)

    return Extension(IN_TURN_REMINDERS_ID, init, "execution deadline, todo and background-task cadence")


def create_system_reminders(options: HostOptions, registry: ReminderRegistry | None = None) -> Extension:
    cfg = _context_settings(host_settings(options))
    models = cfg.get("disableSystemReminderModels") or ()
    if isinstance(models, str):
        models = [models]
    service = SystemReminderService(registry or default_registry(), disabled_models=[str(m) for m in models])
    return system_reminders_extension(service)


def create_in_turn_reminders(options: HostOptions) -> Extension:
    cfg = _context_settings(host_settings(options))
    deadline = cfg.get("turnDeadlineSeconds")
    return in_turn_reminders_extension(InTurnReminders(deadline_seconds=float(deadline) if deadline else None))
