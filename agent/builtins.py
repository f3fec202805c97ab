"""The default extension list and the host-builtin registry.

Built-in features use the same door as third-party extensions: the core tools are an ordinary
configured extension (``core-tools``, can be disabled per session), and host builtins are
ordinary extensions that the registry loads last. Later work adds its host builtins (session report,
runaway guard, tool-output budget) to ``HOST_BUILTIN_FACTORIES``; each factory receives the
``HostOptions`` so it can read settings once at creation.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .spi import Extension, ExtensionAPI
from .tools_fs import FS_TOOLS
from .tools_shell import BASH
from .tools_todo import TODOWRITE

CORE_TOOLS_ID = "core-tools"
CORE_TOOLS = FS_TOOLS + (BASH, TODOWRITE)


def core_tools_extension() -> Extension:
    def init(api: ExtensionAPI) -> None:
        for tool in CORE_TOOLS:
            api.register_tool(tool)

    return Extension(CORE_TOOLS_ID, init, "read, write, edit, ls, grep, bash and todowrite")


def default_extensions() -> list[Extension]:
    from .provenance import source_provenance_extension  # issue 9, mounted by default (off per session)
    from .recovery import terminal_response_recovery_extension  # E1, mounted by default

    return [core_tools_extension(), terminal_response_recovery_extension(), source_provenance_extension()]


@dataclass(frozen=True)
class HostOptions:
    """What host builtins may know when they are created."""

    home: Path
    settings: dict[str, Any] = field(default_factory=dict)


SETTINGS_FILE = "agent.toml"


def host_settings(options: HostOptions) -> dict[str, Any]:
    """``options.settings`` when given, else ``<home>/agent.toml`` ({} when absent or unreadable).

    Tables are named as the settings they hold: ``[runawayGuard]``, ``[contextManagement]``, ...
    Builtins call this once, in their factory.
    """
    if options.settings:
        return options.settings
    try:
        with open(options.home / SETTINGS_FILE, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        logging.getLogger("ctxscope.agent").warning("ignoring %s: %s", options.home / SETTINGS_FILE, e)
        return {}


HostBuiltinFactory = Callable[[HostOptions], Extension]


def _context_management(options: HostOptions) -> Extension:
    from .compaction_auto import create_context_management

    return create_context_management(options)


def _tool_output_budget(options: HostOptions) -> Extension:
    from .tool_output_budget import create_tool_output_budget

    return create_tool_output_budget(options)


def _system_reminders(options: HostOptions) -> Extension:
    from .reminders_extension import create_system_reminders

    return create_system_reminders(options)


def _in_turn_reminders(options: HostOptions) -> Extension:
    from .reminders_extension import create_in_turn_reminders

    return create_in_turn_reminders(options)


def _runaway_guard(options: HostOptions) -> Extension:
    from .guard import create_runaway_guard

    return create_runaway_guard(options)


def _session_report(options: HostOptions) -> Extension:
    from .session_report import create_session_report

    return create_session_report(options)


# Ordered: earlier builtins' handlers run before later ones (all after configured extensions).
# Context management's before_llm_call (compaction) belongs before the in-turn reminders, so
# reminders land on the compacted history (C5); the session report stays last so it records the
# request as sent.
HOST_BUILTIN_FACTORIES: list[HostBuiltinFactory] = [_context_management, _system_reminders, _in_turn_reminders,
                                                    _runaway_guard, _tool_output_budget, _session_report]


def default_host_builtins(options: HostOptions) -> list[Extension]:
    return [factory(options) for factory in HOST_BUILTIN_FACTORIES]
