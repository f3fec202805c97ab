"""The context settings of a runtime: ``[toolResultCompaction]`` and ``[contextManagement]`` merged."""

from __future__ import annotations

from ..core.budget import ContextSettings
from ..core.settings import HostOptions, host_settings


def settings_from(options: HostOptions | None) -> ContextSettings:
    """``[toolResultCompaction]`` (the shared keys) and ``[contextManagement]`` (ours) from the host settings."""
    host = host_settings(options) if options is not None else {}
    merged = {**(host.get("toolResultCompaction") or {}), **(host.get("contextManagement") or {})}
    return ContextSettings.from_mapping(merged, strict=False)  # the tables hold other builtins' keys too
