"""Host settings: what host builtins may know when they are created, and where their settings come from.

A leaf: every feature reads its settings table through ``host_settings`` without importing the host.
"""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETTINGS_FILE = "agent.toml"


@dataclass(frozen=True)
class HostOptions:
    """What host builtins may know when they are created."""

    home: Path
    settings: dict[str, Any] = field(default_factory=dict)


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
