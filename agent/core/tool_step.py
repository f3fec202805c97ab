"""The tool calls of one answer: gated in source order, run concurrently, transformed in source order.

Each result is kept by the call's position in the answer as soon as it exists (``done``, the turn
runner's own dict), so a cancelled step still gives every finished call its result
(``loop.TurnRunner``'s cleanup).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from . import activity as act
from .dispatch import ErrorLog, gate_before_tool_call, transform_after_tool_call
from .events import Effects, Event, ToolCallContext, ToolResultContext
from .messages import ToolCall, ToolResult
from .spi import TurnAssembly
from .state import SessionView
from .tools import ToolContext, run_tool


@dataclass(frozen=True)
class ToolStep:
    """One step's tool calls, with what the handlers and the tools are told about the step."""

    session: SessionView
    turn: int
    step: int
    assembly: TurnAssembly
    tool_names: frozenset[str]
    effects: Effects
    errors: ErrorLog
    emit: Callable[[act.Activity], None]
    parallel: bool

    async def run(self, calls: tuple[ToolCall, ...], done: dict[int, ToolResult]) -> tuple[ToolResult, ...]:
        """Gate in source order, run concurrently, transform in source order (results keyed by position)."""
        for i, call in enumerate(calls):
            block = await gate_before_tool_call(
                self.assembly.handlers_for(Event.BEFORE_TOOL_CALL),
                ToolCallContext(self.session, self.turn, self.step, call, self.tool_names, self.effects),
                self.errors,
            )
            if block is not None:
                done[i] = ToolResult(
                    call.id,
                    call.name,
                    f"Error: blocked: {block.reason}",
                    True,
                    {"blocked": True, "reason": block.reason},
                )
        runnable = [i for i in range(len(calls)) if i not in done]
        for i in runnable:
            self.emit(act.ToolStarted(self.turn, self.step, calls[i]))
        if self.parallel and len(runnable) > 1:
            tasks = [asyncio.create_task(self._execute(i, calls[i], done)) for i in runnable]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
        else:
            for i in runnable:
                await self._execute(i, calls[i], done)
        results = []
        for i, call in enumerate(calls):
            result = await transform_after_tool_call(
                self.assembly.handlers_for(Event.AFTER_TOOL_CALL),
                self._result_ctx(call),
                done[i],
                self.errors,
            )
            results.append(result)
            self.emit(act.ToolFinished(self.turn, self.step, call, result))
        return tuple(results)

    def _result_ctx(self, call: ToolCall) -> Callable[[ToolResult], ToolResultContext]:
        return lambda r: ToolResultContext(self.session, self.turn, self.step, call, r, self.tool_names, self.effects)

    async def _execute(self, index: int, call: ToolCall, done: dict[int, ToolResult]) -> None:
        ctx = ToolContext(self.session, call.id, self.turn, self.step)
        done[index] = await run_tool(self.assembly.tool(call.name), call, ctx)
