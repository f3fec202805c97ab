"""One turn: model call -> tool calls -> model call ... until the model stops.

A step is one answer plus the tool executions it causes. Before each request: queued steering
messages are delivered, then before_llm_call runs; the prepared request is shown to observers,
sent, and the answer goes through after_llm_call (a retry drops the answer's tool calls, so a
rejected answer has no side effects). Tool calls are gated one by one in source order, run
concurrently, and their results pass through after_tool_call in source order (``tool_step.py``).

Cancellation (``task.cancel()``) leaves history consistent: every tool call of the interrupted step
gets a result (finished ones keep theirs, the rest say "cancelled"), the turn's end is recorded,
and CancelledError propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxscope.vocab.kinds import MarkerKind

from . import activity as act
from .assembly import assemble_user_message
from .dispatch import (
    ErrorLog,
    gate_before_llm_call,
    observe,
    observe_read_only,
    transform_after_llm_call,
)
from .events import (
    Abort,
    Answer,
    Effects,
    Event,
    Fail,
    HistoryChanged,
    LlmCallContext,
    LlmCallPrepared,
    LlmCallResult,
    OverflowContext,
    OverflowHandler,
    Retry,
    Skip,
    StepEnd,
    TurnEnd,
    TurnStart,
    annotation_headers,
)
from .history import History
from .messages import (
    Message,
    ToolCall,
    ToolResult,
    assistant_message,
    missing_result,
    tool_message,
    user_message,
    without_tool_calls,
)
from .model import (
    ContextOverflowError,
    ModelClient,
    ModelRequest,
    ModelResponse,
    ProviderError,
    StreamDelta,
    Usage,
)
from .readonly import prepared_view, strict_default
from .spi import TurnAssembly
from .state import SessionView
from .tool_step import ToolStep

log = logging.getLogger("ctxscope.agent.core.loop")


@dataclass
class LoopConfig:
    max_steps: int = 200
    max_answer_retries: int = 3  # after_llm_call retries in a row before the turn fails
    parallel_tools: bool = True
    max_output_tokens: int | None = None  # None: the client's limit
    max_overflow_recoveries: int = 2  # per turn, when an overflow handler is installed
    # a read-only view's mutation attempt fails the turn (tests) instead of being logged and ignored
    strict_views: bool = field(default_factory=strict_default)


@dataclass
class SteeringQueue:
    """Messages queued while a step runs, delivered before the next model request."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def put(self, text: str, meta: Mapping[str, Any] | None = None) -> None:
        self.items.append((text, dict(meta or {})))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.items = self.items, []
        return out


def _add(a: Usage, b: Usage | None) -> Usage:
    if b is None:
        return a
    return Usage(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cache_read_tokens + b.cache_read_tokens,
        a.cache_write_tokens + b.cache_write_tokens,
    )


class TurnRunner:
    def __init__(
        self,
        *,
        session: SessionView,
        client: ModelClient,
        assembly: TurnAssembly,
        history: History,
        turn: int,
        source: str,
        config: LoopConfig,
        steering: SteeringQueue,
        errors: ErrorLog,
        emit: Callable[[act.Activity], None],
        host_reminders: tuple[str, ...] = (),
        on_overflow: OverflowHandler | None = None,
    ) -> None:
        self.session, self.client, self.assembly, self.history = session, client, assembly, history
        self.turn, self.source, self.config, self.steering = turn, source, config, steering
        self.errors, self.emit, self.host_reminders = errors, emit, host_reminders
        self.on_overflow = on_overflow
        self._overflows = 0
        self.effects = Effects()
        self.tool_names = frozenset(t.name for t in assembly.tools)
        self.step = 0
        self.usage = Usage()
        self._pending: tuple[ToolCall, ...] = ()  # calls of the answer whose results are not in history yet
        self._done: dict[int, ToolResult] = {}  # by position in the answer's tool calls
        self.result: act.TurnResult | None = None

    # --- the turn ---------------------------------------------------------------------------------
    async def run(self, text: str) -> act.TurnResult:
        self.history.turn = self.turn
        self.history.notify = self._history_changed
        try:
            await observe(
                self.assembly.handlers_for(Event.TURN_START),
                TurnStart(self.session, self.turn, self.source, text),
                self.errors,
            )
            user = assemble_user_message(
                self.assembly.user_prefixes,
                self.assembly.reminders,
                self.host_reminders,
                text,
                source=self.source,
                turn=self.turn,
            )
            if self.assembly.reminders or any(r.strip() for r in self.host_reminders):
                self.effects.declare(MarkerKind.REMINDER)
            await self.history.append(user)
            outcome, reason, final, kind = await self._steps()
            return await self._end(outcome, reason, final, kind)
        except asyncio.CancelledError:
            self._cancelled_cleanup()
            raise
        finally:
            self.history.notify = None

    async def _steps(self) -> tuple[act.TurnOutcome, str | None, str, str | None]:
        retries = 0
        while True:
            if self.step >= self.config.max_steps:
                return act.MAX_STEPS, f"stopped after {self.step} steps", "", None
            self.step += 1
            self.emit(act.StepStarted(self.turn, self.step))
            await self._deliver_steering()
            gate = await gate_before_llm_call(
                self.assembly.handlers_for(Event.BEFORE_LLM_CALL),
                self._llm_ctx,
                self.history,
                self.assembly.system_prompt,
            )
            decision = gate.decision
            if isinstance(decision, Abort):
                return act.ABORTED, decision.reason, "", None
            if isinstance(decision, Skip):
                return act.SKIPPED, decision.reason, "", None
            if isinstance(decision, Answer):
                answer = assistant_message(decision.text, kind="direct_answer", turn=self.turn, step=self.step)
                await self.history.append(answer)
                await self._step_end(answer, ())
                if self.steering.items:
                    continue
                return act.COMPLETED, None, decision.text, None
            try:
                response = await self._call_model(gate.request_messages, gate.system)
            except ContextOverflowError as e:
                if await self._recover(e, gate.system):
                    continue
                return act.FAILED, str(e), "", e.kind
            except ProviderError as e:
                return act.FAILED, str(e), "", e.kind
            out = await transform_after_llm_call(
                self.assembly.handlers_for(Event.AFTER_LLM_CALL), self._result_ctx(retries), response, self.errors
            )
            response = out.response
            if isinstance(out.verdict, Retry):
                retries += 1
                await self._reject(response, out.verdict)
                if retries > self.config.max_answer_retries:
                    return act.FAILED, f"answer rejected {retries} times: {out.verdict.reason}", "", "retry_limit"
                continue
            if isinstance(out.verdict, Fail):
                kept = without_tool_calls(response.message)
                if kept is not None:
                    await self.history.append(kept.with_meta(kind="failed_answer", turn=self.turn, step=self.step))
                return act.FAILED, out.verdict.reason, "", out.verdict.reason
            retries = 0
            answer = response.message.with_meta(
                turn=self.turn,
                step=self.step,
                stop_reason=response.stop_reason,
                model=response.model,
                usage=response.usage.to_dict() if response.usage else None,
                provider=self.client.provider,
                response_id=response.response_id,  # what the next request names for the provider's cache diagnosis
            )
            self._pending, self._done = answer.tool_calls, {}
            await self.history.append(answer)
            results: tuple[ToolResult, ...] = ()
            if answer.tool_calls:
                results = await self._tool_step().run(answer.tool_calls, self._done)
                await self.history.append(tool_message(results, turn=self.turn, step=self.step))
            self._pending = ()
            await self._step_end(answer, results)
            if answer.tool_calls or self.steering.items:
                continue
            return act.COMPLETED, None, answer.text, None

    # --- pieces -----------------------------------------------------------------------------------
    async def _deliver_steering(self) -> None:
        for text, meta in self.steering.take():
            self.effects.declare(MarkerKind.STEER)
            await self.history.append(user_message(text, **{"kind": "steer", **meta, "turn": self.turn}))

    async def _call_model(self, messages: tuple[Message, ...], system: str) -> ModelResponse:
        headers = annotation_headers(self.session.id, self.turn, self.step, self.effects.take())
        request = ModelRequest(
            system,
            self.assembly.specs(),
            tuple(messages),
            self.config.max_output_tokens or self.client.max_output_tokens,
            headers,
        )
        call = self.client.prepare(request)
        await observe_read_only(
            self.assembly.handlers_for(Event.ON_LLM_CALL_PREPARED),
            LlmCallPrepared(self.session, self.turn, self.step, prepared_view(call)),
            self.errors,
            strict=self.config.strict_views,
        )
        step = self.step

        def on_delta(delta: StreamDelta) -> None:
            self.emit(act.ModelDelta(self.turn, step, delta))

        response = await self.client.send(call, on_delta)
        self.usage = _add(self.usage, response.usage)
        return response

    async def _recover(self, error: ContextOverflowError, system: str) -> bool:
        """Give the overflow handler (compaction) a bounded number of chances to shrink the history."""
        if self.on_overflow is None or self._overflows >= self.config.max_overflow_recoveries:
            return False
        self._overflows += 1
        return bool(
            await self.on_overflow(
                OverflowContext(
                    self.session,
                    self.turn,
                    self.step,
                    error,
                    self._overflows,
                    self.history,
                    system,
                    self.assembly.specs(),
                    self.effects,
                )
            )
        )

    async def _reject(self, response: ModelResponse, verdict: Retry) -> None:
        kept = without_tool_calls(response.message)
        if kept is not None:
            await self.history.append(kept.with_meta(kind="rejected_answer", turn=self.turn, step=self.step))
        await self.history.append(
            user_message(verdict.follow_up, kind="retry", reason=verdict.reason, hidden=True, turn=self.turn)
        )
        self.effects.declare(MarkerKind.RETRY)

    async def _step_end(self, answer: Message, results: tuple[ToolResult, ...]) -> None:
        event = StepEnd(
            self.session,
            self.turn,
            self.step,
            answer,
            results,
            self.effects,
            lambda text, meta: self.steering.put(text, meta),
        )
        await observe(self.assembly.handlers_for(Event.ON_STEP_END), event, self.errors)

    async def _history_changed(
        self, kind: Literal["append", "replace"], messages: tuple[Message, ...], epoch: int, reason: str | None
    ) -> None:
        await observe(
            self.assembly.handlers_for(Event.ON_HISTORY_CHANGED),
            HistoryChanged(self.session, self.turn, kind, messages, epoch, reason),
            self.errors,
        )

    def _tool_step(self) -> ToolStep:
        return ToolStep(
            self.session,
            self.turn,
            self.step,
            self.assembly,
            self.tool_names,
            self.effects,
            self.errors,
            self.emit,
            self.config.parallel_tools,
        )

    def _llm_ctx(
        self, *, history: tuple[Message, ...], request_messages: tuple[Message, ...], system: str
    ) -> LlmCallContext:
        return LlmCallContext(
            self.session, self.turn, self.step, history, request_messages, system, self.assembly.specs(), self.effects
        )

    def _result_ctx(self, retries: int) -> Callable[[ModelResponse], LlmCallResult]:
        return lambda r: LlmCallResult(
            self.session, self.turn, self.step, r, self.history.messages, self.effects, retries
        )

    async def _end(self, outcome: act.TurnOutcome, reason: str | None, text: str, kind: str | None) -> act.TurnResult:
        self.history.file.append_turn_end(self.turn, outcome, reason)
        self.result = act.TurnResult(self.session.id, self.turn, outcome, reason, text, self.step, self.usage, kind)
        await observe(
            self.assembly.handlers_for(Event.TURN_END),
            TurnEnd(self.session, self.turn, self.source, outcome, reason, self.step),
            self.errors,
        )
        return self.result

    def _cancelled_cleanup(self) -> None:
        """Synchronous on purpose: it must finish even if the task is cancelled again."""
        if self.result is not None:  # cancelled while turn_end observers ran: the turn had ended
            return
        last = self.history.messages[-1] if self.history.messages else None
        if self._pending and last is not None and last.role == "assistant" and last.tool_calls == self._pending:
            results = [self._done.get(i) or missing_result(c, "cancelled") for i, c in enumerate(self._pending)]
            self.history.append_now(tool_message(results, turn=self.turn, step=self.step, kind="cancelled"))
        self._pending = ()
        self.history.file.append_turn_end(self.turn, act.CANCELLED, "cancelled")
        self.result = act.TurnResult(
            self.session.id, self.turn, act.CANCELLED, "cancelled", "", self.step, self.usage, "cancelled"
        )
