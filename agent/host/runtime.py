"""The agent runtime: one model client, one extension registry, one session store, many sessions.

    runtime = AgentRuntime(client, home=..., workspace=...)
    session = runtime.create_session()
    result = await session.run("fix the failing test")

Embedding programs use ``runtime.conversation`` (query / lifecycle / ingress / maintenance).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..core import activity as act
from ..core.dispatch import ErrorLog, gate_before_compact, observe
from ..core.events import Defer, Event, OverflowHandler, PostCompact, PreCompact, StopAuto
from ..core.loop import LoopConfig
from ..core.model import ModelClient
from ..core.settings import HostOptions
from ..core.spi import Extension, HandlerEntry, Registry, TurnContext
from ..core.state import ModelInfo
from .builtins import default_extensions, default_host_builtins
from .conversation import Conversation
from .session import AgentSession
from .session_store import SessionStore

log = logging.getLogger("ctxscope.agent.host.runtime")

SYSTEM_PROMPT = """\
You are ctxscope-agent, a coding agent working in the directory {workspace}.
Use the tools to look at files, change them and run commands; relative paths are relative to that directory.
Work in small verified steps: read before you edit, run the relevant check after a change, and keep changes minimal.
When you are done, answer briefly: what you changed or found, and anything left open."""


def default_home() -> Path:
    return Path(os.environ.get("CTXSCOPE_HOME") or Path.home() / ".ctxscope").expanduser()


class AgentRuntime:
    def __init__(
        self,
        client: ModelClient,
        *,
        home: Path | str | None = None,
        workspace: Path | str | None = None,
        extensions: Iterable[Extension] | None = None,
        host_builtins: Iterable[Extension] | None = None,
        host_reminders: Iterable[Callable[[TurnContext], str | None]] = (),
        config: LoopConfig | None = None,
        system_prompt: str | None = None,
        listener: act.Listener | None = None,
        overflow_handler: OverflowHandler | None = None,
    ) -> None:
        self.client = client
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.store = SessionStore(self.home)
        self.workspace = Path(workspace or os.getcwd()).resolve()
        exts = default_extensions() if extensions is None else list(extensions)
        builtins = default_host_builtins(HostOptions(self.home)) if host_builtins is None else list(host_builtins)
        self.registry = Registry(exts, builtins, host=self)
        self.host_reminders = list(host_reminders)
        self.config = config or LoopConfig()
        self._system_prompt = system_prompt
        # an explicit handler wins over the one an extension registers (compaction's on_overflow)
        self.overflow_handler = overflow_handler or self.registry.overflow_handler()
        self.listeners: list[act.Listener] = [listener] if listener else []
        self._sessions: dict[str, AgentSession] = {}
        self.conversation = Conversation(self)

    def system_prompt(self) -> str:
        template = self._system_prompt if self._system_prompt is not None else SYSTEM_PROMPT
        return template.replace("{workspace}", str(self.workspace))

    def model_info(self) -> ModelInfo:
        c = self.client
        return ModelInfo(
            c.provider, c.api, c.model, c.context_window, self.config.max_output_tokens or c.max_output_tokens
        )

    def emit(self, event: act.Activity) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.warning("activity listener failed", exc_info=True)

    # --- sessions ---------------------------------------------------------------------------------
    def create_session(self, title: str = "") -> AgentSession:
        meta = self.store.create(
            workspace=str(self.workspace),
            provider=self.client.provider,
            model=self.client.model,
            title=title,
            api=self.client.api,
        )
        return self.open_session(meta.id)

    def open_session(self, session_id: str) -> AgentSession:
        """The live session (loaded from disk the first time); raises SessionNotFound."""
        live = self._sessions.get(session_id)
        if live is None:
            live = self._sessions[session_id] = AgentSession(self, self.store.get(session_id))
        return live

    def latest_session(self) -> AgentSession | None:
        meta = self.store.latest(str(self.workspace))
        return self.open_session(meta.id) if meta else None

    def live_session(self, session_id: str) -> AgentSession | None:
        """The session if it is open in this runtime (never loads it from disk)."""
        return self._sessions.get(session_id)

    # --- what extensions may ask of the host (core.spi.AgentHost) -----------------------------------
    def history_epoch(self, session_id: str) -> int | None:
        try:
            return self.open_session(session_id).history.epoch
        except KeyError:  # SessionNotFound: a session view without a stored session (tests, embedders)
            return None

    def _session_handlers(self, event: Event, session_id: str) -> tuple[tuple[HandlerEntry, ...], ErrorLog]:
        live = self._sessions.get(session_id)
        disabled = live.disabled if live is not None else set(self._stored_disabled(session_id))
        return self.registry.handlers_for(event, disabled), live.errors if live is not None else ErrorLog()

    def _stored_disabled(self, session_id: str) -> tuple[str, ...]:
        try:
            return self.store.get(session_id).disabled_extensions
        except KeyError:
            return ()

    async def before_compact(self, event: PreCompact) -> Defer | StopAuto | None:
        entries, errors = self._session_handlers(Event.BEFORE_COMPACT, event.session.id)
        return await gate_before_compact(entries, event, errors)

    async def after_compact(self, event: PostCompact) -> None:
        entries, errors = self._session_handlers(Event.AFTER_COMPACT, event.session.id)
        await observe(entries, event, errors)

    def forget_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def aclose(self) -> None:
        for s in list(self._sessions.values()):
            for item in s.queued():
                s.cancel_queued(item.id)
            s.abort()
            await s.wait_idle()
        await self.client.aclose()
