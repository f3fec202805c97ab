"""The SPI events: names, the typed context each handler receives, and the typed results it may return.

Step level: before_llm_call, on_llm_call_prepared, after_llm_call, before_tool_call,
after_tool_call, on_history_changed, on_step_end. Turn level (called by the host around a turn):
turn_start, turn_end. Compaction level (raised by the compaction feature through the host):
before_compact, after_compact. A handler returns ``None`` (or ``PASS``) to let things be.

Beside the events, two hooks of the SPI: the overflow handler (``OverflowContext``: the provider
refused the prompt as too long) and maintenance commands (``MaintenanceContext``: ``/compact``
runs while the session is idle).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from ctxscope.vocab.effects import Effect, format_effect, join_effects
from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import CompactionTrigger, MarkerKind

from .activity import TurnOutcome
from .messages import Message, ToolCall, ToolResult
from .model import ContextOverflowError, ModelResponse, PreparedCall, ToolSpec
from .state import SessionView


class Event(StrEnum):
    """The SPI's event names, spelled here only; ``ExtensionAPI.on``'s overloads tie each to its context type."""

    BEFORE_LLM_CALL = "before_llm_call"
    ON_LLM_CALL_PREPARED = "on_llm_call_prepared"
    AFTER_LLM_CALL = "after_llm_call"
    BEFORE_TOOL_CALL = "before_tool_call"
    AFTER_TOOL_CALL = "after_tool_call"
    ON_HISTORY_CHANGED = "on_history_changed"
    ON_STEP_END = "on_step_end"
    TURN_START = "turn_start"
    TURN_END = "turn_end"
    BEFORE_COMPACT = "before_compact"
    AFTER_COMPACT = "after_compact"


class Effects:
    """Effects declared for the next model request; sent as ``x-ctxscope-event`` so the inspector
    sees them (the grammar is ``ctxscope.vocab.effects``)."""

    def __init__(self) -> None:
        self._pending: list[str] = []

    def declare(self, kind: MarkerKind, /, **params: object) -> None:
        """Declare one effect: a marker kind with parameters (``None`` ones are left out)."""
        if not isinstance(kind, MarkerKind):
            raise TypeError(f"an effect's kind is a MarkerKind, not {kind!r}")
        text = format_effect(kind, **params)
        if text not in self._pending:
            self._pending.append(text)

    def declare_all(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self.declare(effect.kind, **effect.params)

    def take(self) -> list[str]:
        out, self._pending = self._pending, []
        return out

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(self._pending)


# --- annotation headers -------------------------------------------------------------------------
# The proxy strips every ``x-ctxscope-*`` header before forwarding and records them, so the inspector
# shows our agent's effects exactly instead of guessing (ctxscope.vocab.headers).


def annotation_headers(session_id: str, turn: int, step: int, effects: Iterable[str] = ()) -> dict[str, str]:
    """The annotation headers of one request; ``effects`` as ``format_effect`` wrote them."""
    headers = {Annotation.SESSION.value: session_id, Annotation.TURN.value: str(turn), Annotation.STEP.value: str(step)}
    value = join_effects(effects)
    if value:
        headers[Annotation.EVENT.value] = value
    return headers


CompactionStage = Literal["archive", "checkpoint", "none"]  # none: nothing ran (a hook deferred it)
CompactionStatus = Literal["replaced", "failed"]


# --- contexts -----------------------------------------------------------------------------------


CONTEXT_SOURCE = "context"  # a turn assembled for /context (measured, never sent)
COMPACT_SOURCE = "compact"  # a turn assembled for /compact (its prompt and tools, no user message)
MAINTENANCE_SOURCES = frozenset({CONTEXT_SOURCE, COMPACT_SOURCE})


@dataclass(frozen=True)
class TurnStart:
    session: SessionView
    turn: int
    source: str
    text: str

    @property
    def maintenance(self) -> bool:
        """Assembled for /context or /compact: what a turn would send, but no turn (reminders only preview)."""
        return self.source in MAINTENANCE_SOURCES


@dataclass(frozen=True)
class TurnEnd:
    session: SessionView
    turn: int
    source: str
    outcome: TurnOutcome
    reason: str | None
    steps: int


@dataclass(frozen=True)
class LlmCallContext:
    """before_llm_call: ``history`` is persisted; ``request_messages`` is this request's view so far."""

    session: SessionView
    turn: int
    step: int
    history: tuple[Message, ...]
    request_messages: tuple[Message, ...]
    system: str
    tools: tuple[ToolSpec, ...]
    effects: Effects


@dataclass(frozen=True)
class LlmCallPrepared:
    session: SessionView
    turn: int
    step: int
    call: PreparedCall


@dataclass(frozen=True)
class LlmCallResult:
    session: SessionView
    turn: int
    step: int
    response: ModelResponse  # as rewritten by earlier handlers
    history: tuple[Message, ...]
    effects: Effects
    retries: int  # after_llm_call retries already made in this step


@dataclass(frozen=True)
class ToolCallContext:
    session: SessionView
    turn: int
    step: int
    call: ToolCall
    tool_names: frozenset[str]  # tools available in this turn
    effects: Effects


@dataclass(frozen=True)
class ToolResultContext:
    session: SessionView
    turn: int
    step: int
    call: ToolCall
    result: ToolResult  # as rewritten by earlier handlers
    tool_names: frozenset[str]
    effects: Effects


@dataclass(frozen=True)
class HistoryChanged:
    session: SessionView
    turn: int
    kind: Literal["append", "replace"]
    messages: tuple[Message, ...]  # the appended messages, or the whole new history
    epoch: int
    reason: str | None = None


@dataclass(frozen=True)
class StepEnd:
    session: SessionView
    turn: int
    step: int
    answer: Message
    results: tuple[ToolResult, ...]
    effects: Effects
    _steer: Callable[[str, Mapping[str, Any]], None] = field(repr=False, compare=False)

    def steer(self, text: str, **meta: Any) -> None:
        """Queue a user message delivered before the next model request of this turn."""
        self._steer(text, meta)


class HistoryPort(Protocol):
    @property
    def messages(self) -> tuple[Message, ...]: ...

    async def append(self, message: Message) -> None: ...

    async def replace(self, messages: Sequence[Message], reason: str) -> None: ...


@dataclass(frozen=True)
class OverflowContext:
    """The provider refused the prompt as too long. A handler may shrink ``history`` and return True to retry."""

    session: SessionView
    turn: int
    step: int
    error: ContextOverflowError
    attempt: int  # 1 for the first recovery of this turn
    history: HistoryPort
    system: str
    tools: tuple[ToolSpec, ...]
    effects: Effects


OverflowHandler = Callable[[OverflowContext], Awaitable[bool]]


@dataclass(frozen=True)
class PreCompact:
    """before_compact: automatic compaction wants to run; a handler may return ``Defer`` or ``StopAuto``."""

    session: SessionView
    turn: int
    step: int
    trigger: CompactionTrigger
    tokens: int  # footprint before
    trigger_at: int
    input_limit: int


@dataclass(frozen=True)
class PostCompact:
    """after_compact: what a compaction did (observers only)."""

    session: SessionView
    turn: int
    trigger: CompactionTrigger
    stage: CompactionStage
    status: CompactionStatus
    error: str | None
    tokens_before: int
    tokens_after: int | None


class MaintainedHistory(HistoryPort, Protocol):
    @property
    def epoch(self) -> int: ...


@dataclass(frozen=True)
class MaintenanceContext:
    """A maintenance command (``/compact``) on an idle session, with the turn's system prompt and tools assembled.

    ``history.replace`` does not tell observers (no turn runs): the command calls ``history_changed``.
    """

    session: SessionView
    turn: int
    system: str
    tools: tuple[ToolSpec, ...]
    history: MaintainedHistory
    _busy: Callable[[], bool] = field(repr=False, compare=False)
    history_changed: Callable[[Literal["append", "replace"], tuple[Message, ...], int, str | None], Awaitable[None]] = (
        field(repr=False, compare=False)
    )

    def busy(self) -> bool:
        """True once a turn has started on the session (the command's result must then yield to it)."""
        return self._busy()


MaintenanceCommand = Callable[[MaintenanceContext, "str | None"], Awaitable[object]]


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    pass


PASS = Pass()


@dataclass(frozen=True)
class Skip:
    """before_llm_call: make no model call; the turn ends."""

    reason: str


@dataclass(frozen=True)
class Answer:
    """before_llm_call: answer directly with this text instead of calling the model."""

    text: str


@dataclass(frozen=True)
class ModifyRequest:
    """before_llm_call: change this request only (never persisted)."""

    messages: tuple[Message, ...] | None = None
    system: str | None = None


@dataclass(frozen=True)
class ReplaceHistory:
    """before_llm_call: replace the whole history persistently (a new history epoch)."""

    messages: tuple[Message, ...]
    reason: str


@dataclass(frozen=True)
class AppendMessage:
    """before_llm_call: append a hidden message to history; later handlers do not run."""

    message: Message


@dataclass(frozen=True)
class Abort:
    reason: str


@dataclass(frozen=True)
class RewriteText:
    """after_llm_call: replace the answer's text (tool calls stay)."""

    text: str


@dataclass(frozen=True)
class Retry:
    """after_llm_call: reject the answer; its tool calls are dropped and ``follow_up`` asks again."""

    follow_up: str
    reason: str


@dataclass(frozen=True)
class Fail:
    """after_llm_call: fail the turn."""

    reason: str


@dataclass(frozen=True)
class Block:
    """before_tool_call: do not run the tool; the model gets an error result with the reason."""

    reason: str


@dataclass(frozen=True)
class RewriteResult:
    """after_tool_call: replace fields of the result (None keeps a field)."""

    content: str | None = None
    is_error: bool | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Defer:
    """before_compact: not now; asked again before the next request."""

    reason: str = "deferred by a PreCompact hook"


@dataclass(frozen=True)
class StopAuto:
    """before_compact: no automatic compaction for this session any more (a manual /compact turns it back on)."""

    reason: str = "stopped by a PreCompact hook"


BEFORE_LLM_RESULTS = (Pass, Skip, Answer, ModifyRequest, ReplaceHistory, AppendMessage, Abort)

# --- handler types per event (what ``ExtensionAPI.on`` accepts) --------------------------------------

_R = TypeVar("_R")
Maybe: TypeAlias = _R | Awaitable[_R]  # a handler may be a plain function or a coroutine
BeforeLlmResult = Pass | Skip | Answer | ModifyRequest | ReplaceHistory | AppendMessage | Abort | None
AfterLlmResult = Pass | RewriteText | Retry | Fail | None
BeforeToolResult = Pass | Block | None
AfterToolResult = Pass | RewriteResult | None
BeforeCompactResult = Defer | StopAuto | None
BeforeLlmHandler = Callable[[LlmCallContext], Maybe[BeforeLlmResult]]
AfterLlmHandler = Callable[[LlmCallResult], Maybe[AfterLlmResult]]
BeforeToolHandler = Callable[[ToolCallContext], Maybe[BeforeToolResult]]
AfterToolHandler = Callable[[ToolResultContext], Maybe[AfterToolResult]]
BeforeCompactHandler = Callable[[PreCompact], Maybe[BeforeCompactResult]]
Observer = Callable[[Any], object]  # observers' results are ignored; each event's context type is in spi.on's overloads
