"""The default extension list and the host-builtin registry.

Built-in features use the same door as third-party extensions: the core tools are an ordinary
configured extension (``core-tools``, can be disabled per session), and host builtins are
ordinary extensions that the registry loads last. Later work adds its host builtins (session report,
runaway guard, tool-output budget) to ``HOST_BUILTIN_FACTORIES``; each factory receives the
``HostOptions`` so it can read settings once at creation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    return [core_tools_extension()]


@dataclass(frozen=True)
class HostOptions:
    """What host builtins may know when they are created."""

    home: Path
    settings: dict[str, Any] = field(default_factory=dict)


HostBuiltinFactory = Callable[[HostOptions], Extension]

# Ordered: earlier builtins' handlers run before later ones (all after configured extensions).
HOST_BUILTIN_FACTORIES: list[HostBuiltinFactory] = []


def default_host_builtins(options: HostOptions) -> list[Extension]:
    return [factory(options) for factory in HOST_BUILTIN_FACTORIES]
