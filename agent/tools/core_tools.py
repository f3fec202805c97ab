"""The core tools as one ordinary configured extension (``core-tools``; it can be disabled per session)."""

from __future__ import annotations

from ..core.spi import Extension, ExtensionAPI
from .fs import FS_TOOLS
from .shell import BASH
from .todo import TODOWRITE

CORE_TOOLS_ID = "core-tools"
CORE_TOOLS = FS_TOOLS + (BASH, TODOWRITE)


def core_tools_extension() -> Extension:
    def init(api: ExtensionAPI) -> None:
        for tool in CORE_TOOLS:
            api.register_tool(tool)

    return Extension(CORE_TOOLS_ID, init, "read, write, edit, ls, grep, bash and todowrite")
