"""Tools: the definition an extension registers, the context a tool runs in, and the safe runner.

``run_tool`` turns every failure (unknown tool, bad arguments, ToolError, any exception) into an
error result the model can read: a tool never crashes the loop. Cancellation still propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .messages import ToolCall, ToolResult
from .model import ToolSpec
from .state import SessionView

log = logging.getLogger("ctxscope.agent.core.tools")


class ToolError(Exception):
    """An expected tool failure; its message goes to the model as an error result."""


@dataclass(frozen=True)
class ToolOutput:
    content: str
    is_error: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolContext:
    session: SessionView
    call_id: str
    turn: int
    step: int

    @property
    def workspace(self) -> Path:
        return self.session.workspace

    def resolve(self, path: str) -> Path:
        """A path relative to the workspace (absolute paths are taken as given, e.g. artifacts)."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string")
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.workspace / p)


Execute = Callable[[dict[str, Any], ToolContext], Awaitable["ToolOutput | str"]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of an object
    execute: Execute = field(repr=False)

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def validate_arguments(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """Required keys and top-level types; a message for the model, or None when fine."""
    props = schema.get("properties") or {}
    missing = [k for k in schema.get("required") or [] if k not in args]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            if schema.get("additionalProperties") is False:
                return f"unknown argument {key!r}"
            continue
        want = spec.get("type")
        if want in _TYPES and value is not None:
            ok = isinstance(value, _TYPES[want]) and not (want in ("integer", "number") and isinstance(value, bool))
            if not ok:
                return f"argument {key!r} must be of type {want}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {key!r} must be one of {spec['enum']}"
    return None


def error_result(call: ToolCall, message: str, **details: Any) -> ToolResult:
    return ToolResult(call.id, call.name, f"Error: {message}", is_error=True, details=details)


async def run_tool(tool: Tool | None, call: ToolCall, ctx: ToolContext) -> ToolResult:
    if tool is None:
        return error_result(call, f"unknown tool {call.name!r}", reason="unknown_tool")
    if call.invalid_arguments:
        return error_result(
            call, f"{call.invalid_arguments}; send the arguments as one JSON object", reason="invalid_arguments"
        )
    problem = validate_arguments(tool.parameters, call.arguments)
    if problem:
        return error_result(call, problem, reason="invalid_arguments")
    try:
        out = await tool.execute(dict(call.arguments), ctx)
    except ToolError as e:
        return error_result(call, str(e), reason="tool_error")
    except Exception as e:  # a bug in a tool must not end the turn
        log.warning("tool %s raised", call.name, exc_info=True)
        return error_result(call, f"{type(e).__name__}: {e}", reason="exception")
    if isinstance(out, str):
        out = ToolOutput(out)
    return ToolResult(call.id, call.name, out.content, out.is_error, dict(out.details))
