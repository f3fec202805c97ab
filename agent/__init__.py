"""ctxscope.agent: a small coding agent whose every model call is visible in the ctxscope inspector.

    from ctxscope.agent import AgentRuntime, Extension, make_client, resolve
    rt = AgentRuntime(make_client(resolve("sim")), extensions=[*default_extensions(), my_extension])
    result = await rt.create_session().run("fix the failing test")

Extensions (``spi``) hook the nine events (``events``); the loop is in ``loop``, sessions on disk
in ``session_store``, the embedding API in ``conversation``, the CLI group in ``cli_commands``.
"""

from .activity import TurnResult
from .builtins import HOST_BUILTIN_FACTORIES, HostOptions, core_tools_extension, default_extensions
from .events import (
                     Abort,
                     Answer,
                     AppendMessage,
                     Block,
                     Fail,
                     ModifyRequest,
                     ReplaceHistory,
                     Retry,
                     RewriteResult,
                     RewriteText,
                     Skip,
)
from .loop import LoopConfig, OverflowContext
from .providers import make_client, resolve
from .retry import ContextOverflowError, ProviderError
from .runtime import AgentRuntime
from .scripted import ScriptedModel
from .spi import AssemblyError, Extension, ExtensionAPI, SPIError
from .tools import Tool, ToolContext, ToolError, ToolOutput

__all__ = [
                     "HOST_BUILTIN_FACTORIES",
                     "Abort",
                     "AgentRuntime",
                     "Answer",
                     "AppendMessage",
                     "AssemblyError",
                     "Block",
                     "ContextOverflowError",
                     "Extension",
                     "ExtensionAPI",
                     "Fail",
                     "HostOptions",
                     "LoopConfig",
                     "ModifyRequest",
                     "OverflowContext",
                     "ProviderError",
                     "ReplaceHistory",
                     "Retry",
                     "RewriteResult",
                     "RewriteText",
                     "SPIError",
                     "ScriptedModel",
                     "Skip",
                     "Tool",
                     "ToolContext",
                     "ToolError",
                     "ToolOutput",
                     "TurnResult",
                     "core_tools_extension",
                     "default_extensions",
                     "make_client",
                     "resolve",
]
