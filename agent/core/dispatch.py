"""One small dispatcher per dispatch style, not one generic emitter.

- Observers (on_llm_call_prepared, on_history_changed, on_step_end, turn_start, turn_end): every
  handler runs; an exception is counted and logged and the next handler still runs. The prepared
  call's observers get a read-only view; a mutation attempt is ignored, or fails the turn in strict
  mode.
- Gates fail closed: in before_llm_call an exception aborts the model call, and an AppendMessage
  ends the chain; in before_tool_call an exception blocks the tool, the first Block wins.
- Transforms (after_llm_call, after_tool_call) are a pipeline of copies: each handler sees the
  previous handler's output; a failing handler is skipped (counted, logged), its input passes on.
Handlers may be plain functions or coroutines.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from .events import (
    BEFORE_LLM_RESULTS,
    Abort,
    Answer,
    AppendMessage,
    Block,
    Defer,
    Fail,
    HistoryPort,
    LlmCallContext,
    LlmCallResult,
    ModifyRequest,
    Pass,
    PreCompact,
    ReplaceHistory,
    Retry,
    RewriteResult,
    RewriteText,
    Skip,
    StopAuto,
    ToolCallContext,
    ToolResultContext,
)
from .messages import Message, ToolResult, replace_text
from .model import ModelResponse
from .readonly import ReadOnlyViolation, is_violation
from .spi import ErasedHandler, HandlerEntry

_V = TypeVar("_V")
log = logging.getLogger("ctxscope.agent.core.dispatch")


@dataclass
class ErrorLog:
    """Handler failures per event: an observer's error (on_step_end included) is counted, never fatal."""

    counts: Counter = field(default_factory=Counter)
    recent: list[str] = field(default_factory=list)

    def record(self, event: str, entry: HandlerEntry, problem: BaseException | str) -> None:
        self.counts[event] += 1
        text = problem if isinstance(problem, str) else f"{type(problem).__name__}: {problem}"
        self.recent = (self.recent + [f"{event} [{entry.extension_id}] {text}"])[-50:]
        log.warning(
            "%s handler of extension %r failed: %s",
            event,
            entry.extension_id,
            text,
            exc_info=None if isinstance(problem, str) else problem,
        )


async def call(fn: ErasedHandler, event: object) -> object:
    result = fn(event)
    if inspect.isawaitable(result):
        result = await result
    return result


# --- observers ----------------------------------------------------------------------------------


async def observe(entries: Sequence[HandlerEntry], event: object, errors: ErrorLog) -> None:
    for entry in entries:
        try:
            await call(entry.fn, event)
        except Exception as exc:
            errors.record(entry.event, entry, exc)


async def observe_read_only(entries: Sequence[HandlerEntry], event: object, errors: ErrorLog, *, strict: bool) -> None:
    """Observers of a read-only view (``core.readonly``): a mutation attempt is logged, counted and ignored, or,
    when ``strict`` (tests), raised so that the turn fails loudly; other failures are an observer's errors."""
    for entry in entries:
        try:
            await call(entry.fn, event)
        except Exception as exc:
            if is_violation(exc):
                if strict:
                    raise ReadOnlyViolation(
                        f"{entry.event} handler of extension {entry.extension_id!r} tried to "
                        f"change a read-only view: {exc}"
                    ) from exc
                errors.record(entry.event, entry, f"mutation attempt ignored (the view is read-only): {exc}")
                continue
            errors.record(entry.event, entry, exc)


# --- gates --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmGateOutcome:
    decision: Skip | Answer | Abort | None  # None: call the model with this request
    request_messages: tuple[Message, ...]
    system: str


async def gate_before_llm_call(
    entries: Sequence[HandlerEntry], make_ctx: Callable[..., LlmCallContext], history: HistoryPort, system: str
) -> LlmGateOutcome:
    """Run before_llm_call handlers in order; any exception aborts the call (fail closed)."""
    request: tuple[Message, ...] | None = None
    for entry in entries:
        view = request if request is not None else history.messages
        try:
            r = await call(entry.fn, make_ctx(history=history.messages, request_messages=view, system=system))
            if r is not None and not isinstance(r, BEFORE_LLM_RESULTS):
                raise TypeError(f"returned {type(r).__name__}, not a before_llm_call result")
            if isinstance(r, AppendMessage) and not entry.appends:
                raise TypeError("returned AppendMessage but was not registered with appends=True")
        except Exception as exc:
            log.error("before_llm_call handler of %r failed; model call aborted", entry.extension_id, exc_info=exc)
            reason = f"before_llm_call handler of {entry.extension_id!r} failed: {type(exc).__name__}: {exc}"
            return LlmGateOutcome(Abort(reason), request if request is not None else history.messages, system)
        if r is None or isinstance(r, Pass):
            continue
        if isinstance(r, ModifyRequest):
            if r.messages is not None:
                request = tuple(r.messages)
            if r.system is not None:
                system = r.system
        elif isinstance(r, ReplaceHistory):
            await history.replace(r.messages, r.reason)
            request = None  # the request view restarts from the new history
        elif isinstance(r, AppendMessage):
            await history.append(r.message)
            request = (request + (r.message,)) if request is not None else None
            break  # later handlers do not run
        else:  # Skip, Answer, Abort end the chain
            return LlmGateOutcome(r, request if request is not None else history.messages, system)
    return LlmGateOutcome(None, request if request is not None else history.messages, system)


async def gate_before_tool_call(
    entries: Sequence[HandlerEntry], ctx: ToolCallContext, errors: ErrorLog
) -> Block | None:
    """The first Block wins; an exception or a wrong result type blocks the call (fail closed)."""
    for entry in entries:
        try:
            r = await call(entry.fn, ctx)
        except Exception as exc:
            errors.record(entry.event, entry, exc)
            return Block(f"the {entry.extension_id} check failed ({type(exc).__name__}), so the call was blocked")
        if isinstance(r, Block):
            return r
        if r is not None and not isinstance(r, Pass):
            errors.record(entry.event, entry, f"returned {type(r).__name__}")
            return Block(f"the {entry.extension_id} check returned an invalid result, so the call was blocked")
    return None


async def gate_before_compact(
    entries: Sequence[HandlerEntry], event: PreCompact, errors: ErrorLog
) -> Defer | StopAuto | None:
    """The first Defer or StopAuto wins; a failing handler is counted and logged and counts as proceed
    (a broken plugin must not leave the context to overflow)."""
    for entry in entries:
        try:
            r = await call(entry.fn, event)
        except Exception as exc:
            errors.record(entry.event, entry, exc)
            continue
        if isinstance(r, (Defer, StopAuto)):
            return r
    return None


# --- transforms ---------------------------------------------------------------------------------


async def _transform_step(entry: HandlerEntry, make_ctx: Callable[[_V], object], value: _V, errors: ErrorLog) -> object:
    """One handler of a pipeline; a failing one is logged and yields None, so its input passes on."""
    try:
        return await call(entry.fn, make_ctx(value))
    except Exception as exc:
        errors.record(entry.event, entry, exc)
        return None


def _ignore_other(entry: HandlerEntry, r: object, errors: ErrorLog) -> None:
    """A transform's result of a type its event does not take is logged and ignored."""
    if r is not None and not isinstance(r, Pass):
        errors.record(entry.event, entry, f"returned {type(r).__name__}, ignored")


@dataclass(frozen=True)
class AfterLlmOutcome:
    response: ModelResponse
    verdict: Retry | Fail | None


async def transform_after_llm_call(
    entries: Sequence[HandlerEntry],
    make_ctx: Callable[[ModelResponse], LlmCallResult],
    response: ModelResponse,
    errors: ErrorLog,
) -> AfterLlmOutcome:
    for entry in entries:
        r = await _transform_step(entry, make_ctx, response, errors)
        if isinstance(r, RewriteText):
            response = replace(response, message=replace_text(response.message, r.text))
        elif isinstance(r, (Retry, Fail)):
            return AfterLlmOutcome(response, r)
        else:
            _ignore_other(entry, r, errors)
    return AfterLlmOutcome(response, None)


async def transform_after_tool_call(
    entries: Sequence[HandlerEntry],
    make_ctx: Callable[[ToolResult], ToolResultContext],
    result: ToolResult,
    errors: ErrorLog,
) -> ToolResult:
    for entry in entries:
        r = await _transform_step(entry, make_ctx, result, errors)
        if isinstance(r, RewriteResult):
            result = replace(
                result,
                content=result.content if r.content is None else r.content,
                is_error=result.is_error if r.is_error is None else r.is_error,
                details=dict(result.details) if r.details is None else dict(r.details),
            )
        else:
            _ignore_other(entry, r, errors)
    return result
