"""The extension SPI: an extension is ``{id, description?, init(api)}``; the registry assembles each turn.

Inside ``init`` an extension may make these contributions through ``ExtensionAPI``: tools (static
or a factory evaluated per turn), system-prompt parts, user-prompt prefixes, reminder providers,
event handlers (``on``, typed per event), an overflow handler (``on_overflow``) and maintenance
commands (``register_command``, e.g. ``compact``). After ``init`` returns the API is sealed: a call
raises, so an extension cannot keep the API and change the agent behind the host's back. What an
extension may ask of the host (the model client, the live history's epoch, raising the compaction
events) is the ``AgentHost`` protocol, ``api.host``: never the runtime itself.

Host builtins (session report, runaway guard, tool-output budget, ...) are ordinary extensions,
loaded after every configured extension so their handlers run last and see every other rewrite;
a configured extension may not take a builtin's id.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, overload

from .assembly import ReminderFormatError, validate_reminder
from .events import (
    AfterLlmHandler,
    AfterToolHandler,
    BeforeCompactHandler,
    BeforeLlmHandler,
    BeforeToolHandler,
    Defer,
    Event,
    HistoryChanged,
    LlmCallPrepared,
    MaintenanceCommand,
    Maybe,
    Observer,
    OverflowHandler,
    PostCompact,
    PreCompact,
    StepEnd,
    StopAuto,
    TurnEnd,
    TurnStart,
)
from .model import ModelClient, ToolSpec
from .state import ModelInfo
from .tools import Tool

log = logging.getLogger("ctxscope.agent.core.spi")

TurnContext = TurnStart  # what per-turn factories and providers receive
Handler = BeforeLlmHandler | AfterLlmHandler | BeforeToolHandler | AfterToolHandler | BeforeCompactHandler | Observer
# Handlers are typed where they are registered (``ExtensionAPI.on``'s overloads) and stored erased:
# one list holds every event's handlers, and the dispatchers hand each the context of its event.
ErasedHandler = Callable[[Any], object]
ToolFactory = Callable[[TurnContext], Tool | Sequence[Tool] | None]
TextSource = str | Callable[[TurnContext], str | None]
ReminderProvider = Callable[[TurnContext], str | None]


class AgentHost(Protocol):
    """What the host offers an extension beyond its events (``api.host``)."""

    @property
    def client(self) -> ModelClient: ...

    def model_info(self) -> ModelInfo: ...

    def history_epoch(self, session_id: str) -> int | None:
        """The live history's epoch of a session (None when the host holds no such session)."""
        ...

    async def before_compact(self, event: PreCompact) -> Defer | StopAuto | None:
        """Raise before_compact to the session's enabled extensions; the first Defer or StopAuto wins."""
        ...

    async def after_compact(self, event: PostCompact) -> None: ...


class SPIError(Exception):
    """An extension broke the SPI contract."""


class AssemblyError(SPIError):
    """A turn could not be assembled (duplicate tool names, malformed reminder, ...)."""


@dataclass(frozen=True)
class HandlerEntry:
    extension_id: str
    event: Event
    fn: ErasedHandler
    appends: bool = False  # before_llm_call only: may return AppendMessage
    host: bool = False


@dataclass
class Contributions:
    tools: list[Tool | ToolFactory] = field(default_factory=list)
    system_prompts: list[TextSource] = field(default_factory=list)
    user_prefixes: list[TextSource] = field(default_factory=list)
    reminders: list[tuple[int, ReminderProvider]] = field(default_factory=list)
    handlers: list[HandlerEntry] = field(default_factory=list)
    overflow: list[OverflowHandler] = field(default_factory=list)
    commands: dict[str, MaintenanceCommand] = field(default_factory=dict)


class ExtensionAPI:
    """Handed to ``init``; valid only while ``init`` runs."""

    def __init__(self, extension_id: str, *, host: bool = False, services: AgentHost | None = None) -> None:
        self.extension_id = extension_id
        self._host = host
        self._services = services
        self._open = True
        self.contributions = Contributions()

    @property
    def host(self) -> AgentHost | None:
        """The host's services (None when the registry was built without a host, e.g. in unit tests)."""
        return self._services

    def _require_init(self, what: str) -> None:
        if not self._open:
            raise SPIError(f"extension {self.extension_id!r}: {what}() may only be called inside init()")

    def register_tool(self, tool: Tool | ToolFactory) -> None:
        self._require_init("register_tool")
        if not isinstance(tool, Tool) and not callable(tool):
            raise SPIError(f"extension {self.extension_id!r}: register_tool needs a Tool or a factory")
        self.contributions.tools.append(tool)

    def contribute_system_prompt(self, text: TextSource) -> None:
        self._require_init("contribute_system_prompt")
        self.contributions.system_prompts.append(text)

    def contribute_user_prompt_prefix(self, text: TextSource) -> None:
        self._require_init("contribute_user_prompt_prefix")
        self.contributions.user_prefixes.append(text)

    def register_reminder_provider(self, provider: ReminderProvider, *, priority: int = 0) -> None:
        self._require_init("register_reminder_provider")
        self.contributions.reminders.append((priority, provider))

    @overload
    def on(
        self, event: Literal[Event.BEFORE_LLM_CALL], handler: BeforeLlmHandler, *, appends: bool = False
    ) -> None: ...
    @overload
    def on(self, event: Literal[Event.AFTER_LLM_CALL], handler: AfterLlmHandler) -> None: ...
    @overload
    def on(self, event: Literal[Event.BEFORE_TOOL_CALL], handler: BeforeToolHandler) -> None: ...
    @overload
    def on(self, event: Literal[Event.AFTER_TOOL_CALL], handler: AfterToolHandler) -> None: ...
    @overload
    def on(self, event: Literal[Event.BEFORE_COMPACT], handler: BeforeCompactHandler) -> None: ...
    @overload
    def on(
        self, event: Literal[Event.ON_LLM_CALL_PREPARED], handler: Callable[[LlmCallPrepared], Maybe[object]]
    ) -> None: ...
    @overload
    def on(
        self, event: Literal[Event.ON_HISTORY_CHANGED], handler: Callable[[HistoryChanged], Maybe[object]]
    ) -> None: ...
    @overload
    def on(self, event: Literal[Event.ON_STEP_END], handler: Callable[[StepEnd], Maybe[object]]) -> None: ...
    @overload
    def on(self, event: Literal[Event.TURN_START], handler: Callable[[TurnStart], Maybe[object]]) -> None: ...
    @overload
    def on(self, event: Literal[Event.TURN_END], handler: Callable[[TurnEnd], Maybe[object]]) -> None: ...
    @overload
    def on(self, event: Literal[Event.AFTER_COMPACT], handler: Callable[[PostCompact], Maybe[object]]) -> None: ...

    def on(self, event: Event, handler: Handler, *, appends: bool = False) -> None:
        """Subscribe to an event; the overloads give each event's context and result types.

        ``appends=True`` declares a before_llm_call appender.
        """
        self._require_init("on")
        try:
            event = Event(event)  # a caller without mypy may pass the name as a plain string
        except ValueError:
            raise SPIError(f"extension {self.extension_id!r}: unknown event {event!r}") from None
        if appends and event is not Event.BEFORE_LLM_CALL:
            raise SPIError("appends=True only applies to before_llm_call")
        self.contributions.handlers.append(HandlerEntry(self.extension_id, event, handler, appends, self._host))

    def on_overflow(self, handler: OverflowHandler) -> None:
        """Handle a provider's "prompt too long": shrink the history and return True to retry the request."""
        self._require_init("on_overflow")
        self.contributions.overflow.append(handler)

    def register_command(self, name: str, command: MaintenanceCommand) -> None:
        """A maintenance command the host runs on an idle session (``compact`` for /compact)."""
        self._require_init("register_command")
        if name in self.contributions.commands:
            raise SPIError(f"extension {self.extension_id!r}: command {name!r} registered twice")
        self.contributions.commands[name] = command

    def _seal(self) -> None:
        self._open = False


@dataclass(frozen=True)
class Extension:
    id: str
    init: Callable[[ExtensionAPI], object]  # returns None; a coroutine (async init) is refused
    description: str = ""


@dataclass(frozen=True)
class TurnAssembly:
    """Everything the extensions contribute to one turn, in dispatch order."""

    tools: tuple[Tool, ...]
    system_prompt: str
    user_prefixes: tuple[str, ...]
    reminders: tuple[str, ...]  # validated blocks, highest priority first
    handlers: Mapping[Event, tuple[HandlerEntry, ...]]
    extension_ids: tuple[str, ...]

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec() for t in self.tools)

    def handlers_for(self, event: Event) -> tuple[HandlerEntry, ...]:
        return self.handlers.get(event, ())


@dataclass(frozen=True)
class _Loaded:
    extension: Extension
    host: bool
    contributions: Contributions


def _load(ext: Extension, host: bool, services: AgentHost | None) -> _Loaded:
    api = ExtensionAPI(ext.id, host=host, services=services)
    try:
        result = ext.init(api)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise SPIError(f"extension {ext.id!r}: init must be synchronous")
    except SPIError:
        raise
    except Exception as e:
        raise SPIError(f"extension {ext.id!r} failed in init: {type(e).__name__}: {e}") from e
    finally:
        api._seal()
    return _Loaded(ext, host, api.contributions)


def _text(source: TextSource, ctx: TurnContext) -> str:
    value = source(ctx) if callable(source) else source
    return value or ""


class Registry:
    def __init__(
        self,
        extensions: Iterable[Extension] = (),
        host_builtins: Iterable[Extension] = (),
        *,
        host: AgentHost | None = None,
    ) -> None:
        extensions, host_builtins = list(extensions), list(host_builtins)
        seen: set[str] = set()
        builtin_ids = {e.id for e in host_builtins}
        for ext in extensions + host_builtins:
            if not ext.id:
                raise SPIError("an extension needs an id")
            if ext.id in seen:
                kind = "host builtin" if ext.id in builtin_ids else "extension"
                raise SPIError(
                    f"{kind} id {ext.id!r} is used twice"
                    + (" (host builtins cannot be replaced)" if ext.id in builtin_ids else "")
                )
            seen.add(ext.id)
        self._loaded = [_load(e, False, host) for e in extensions] + [_load(e, True, host) for e in host_builtins]

    @property
    def extension_ids(self) -> tuple[str, ...]:
        return tuple(x.extension.id for x in self._loaded)

    def is_host_builtin(self, extension_id: str) -> bool:
        return any(x.host and x.extension.id == extension_id for x in self._loaded)

    def overflow_handler(self) -> OverflowHandler | None:
        """The first registered overflow handler (in load order)."""
        return next((h for x in self._loaded for h in x.contributions.overflow), None)

    def command(self, name: str) -> MaintenanceCommand | None:
        """The maintenance command ``name`` (the first extension that registered it)."""
        return next((x.contributions.commands[name] for x in self._loaded if name in x.contributions.commands), None)

    def handlers_for(self, event: Event, disabled: Iterable[str] = ()) -> tuple[HandlerEntry, ...]:
        """The handlers of ``event`` of the enabled extensions, in dispatch order, without assembling a turn."""
        off = set(disabled)
        return tuple(
            h for x in self._loaded if x.extension.id not in off for h in x.contributions.handlers if h.event == event
        )

    def assemble(self, ctx: TurnContext, *, base_system_prompt: str = "", disabled: Iterable[str] = ()) -> TurnAssembly:
        off = set(disabled)
        active = [x for x in self._loaded if x.extension.id not in off]
        tools: dict[str, tuple[str, Tool]] = {}
        system = [base_system_prompt] if base_system_prompt else []
        prefixes: list[str] = []
        reminders: list[tuple[int, int, str]] = []
        handlers: dict[Event, list[HandlerEntry]] = {}
        for x in active:
            c, ext_id = x.contributions, x.extension.id
            for contribution in c.tools:
                for tool in self._resolve_tools(contribution, ctx, ext_id):
                    if tool.name in tools:
                        raise AssemblyError(
                            f"tool {tool.name!r} is contributed by both {tools[tool.name][0]!r} and {ext_id!r}"
                        )
                    tools[tool.name] = (ext_id, tool)
            system += [t for t in (_text(s, ctx) for s in c.system_prompts) if t.strip()]
            prefixes += [t for t in (_text(s, ctx) for s in c.user_prefixes) if t.strip()]
            for priority, provider in c.reminders:
                try:
                    raw = provider(ctx)
                except Exception:
                    log.warning("reminder provider of %s failed; skipped", ext_id, exc_info=True)
                    continue
                try:
                    block = validate_reminder(raw or "", origin=ext_id)
                except ReminderFormatError as e:
                    raise AssemblyError(str(e)) from None
                if block:
                    reminders.append((-priority, len(reminders), block))
            for h in c.handlers:
                handlers.setdefault(h.event, []).append(h)
        if Event.BEFORE_LLM_CALL in handlers:  # request-only modifiers run before appenders
            handlers[Event.BEFORE_LLM_CALL].sort(key=lambda h: h.appends)
        return TurnAssembly(
            tools=tuple(t for _, t in tools.values()),
            system_prompt="\n\n".join(system),
            user_prefixes=tuple(prefixes),
            reminders=tuple(text for _, _, text in sorted(reminders)),
            handlers={k: tuple(v) for k, v in handlers.items()},
            extension_ids=tuple(x.extension.id for x in active),
        )

    @staticmethod
    def _resolve_tools(contribution: Tool | ToolFactory, ctx: TurnContext, ext_id: str) -> list[Tool]:
        if isinstance(contribution, Tool):
            return [contribution]
        made = contribution(ctx)
        if made is None:
            return []
        made = [made] if isinstance(made, Tool) else list(made)
        for t in made:
            if not isinstance(t, Tool):
                raise AssemblyError(f"tool factory of {ext_id!r} returned {type(t).__name__}, not Tool")
        return made
