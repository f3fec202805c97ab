"""The conversation API for programs that embed the runtime (the CLI is one of them).

Four groups, runtime-independent in shape: ``query`` (sessions, messages, turns), ``lifecycle``
(create, rename, delete), ``ingress`` (submit, run, steer, queued inputs: list / edit / cancel /
reorder, abort) and ``maintenance`` (compact: the maintenance command an extension registers
through the SPI). Every turn records its source (``cli``, ``api``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.activity import TurnResult
from ..core.history import TurnRecord
from ..core.messages import Message
from .session import QueuedInput, SessionBusy
from .session_store import SessionMeta

if TYPE_CHECKING:
    from .runtime import AgentRuntime
    from .session import AgentSession


class NotAvailable(RuntimeError):
    """A capability that is not built (yet)."""


class ConversationQuery:
    def __init__(self, rt: AgentRuntime) -> None:
        self._rt = rt

    def sessions(self) -> list[SessionMeta]:
        return self._rt.store.list()

    def session(self, session_id: str) -> SessionMeta:
        return self._rt.store.get(session_id)

    def messages(self, session_id: str) -> list[Message]:
        """The live history (after the last replacement)."""
        return list(self._rt.open_session(session_id).messages)

    def turns(self, session_id: str) -> list[TurnRecord]:
        return self._rt.store.history(session_id).load().turns


class ConversationLifecycle:
    def __init__(self, rt: AgentRuntime) -> None:
        self._rt = rt

    def create(self, title: str = "") -> SessionMeta:
        return self._rt.create_session(title).meta

    def rename(self, session_id: str, title: str) -> SessionMeta:
        return self._rt.store.rename(session_id, title)

    def delete(self, session_id: str) -> None:
        live = self._rt.live_session(session_id)
        if live is not None and (live.busy or live.queued()):
            raise SessionBusy(f"session {session_id} is running a turn; abort it first")
        self._rt.store.delete(session_id)
        self._rt.forget_session(session_id)


class ConversationIngress:
    def __init__(self, rt: AgentRuntime) -> None:
        self._rt = rt

    def _s(self, session_id: str) -> AgentSession:
        return self._rt.open_session(session_id)

    def submit(self, session_id: str, text: str, *, source: str = "api") -> QueuedInput:
        return self._s(session_id).submit(text, source)

    async def run(self, session_id: str, text: str, *, source: str = "api") -> TurnResult:
        return await self._s(session_id).run(text, source)

    def steer(self, session_id: str, text: str, *, source: str = "api") -> None:
        self._s(session_id).steer(text, source)

    def queued(self, session_id: str) -> list[QueuedInput]:
        return self._s(session_id).queued()

    def edit_queued(self, session_id: str, input_id: str, text: str) -> None:
        self._s(session_id).edit_queued(input_id, text)

    def cancel_queued(self, session_id: str, input_id: str) -> None:
        self._s(session_id).cancel_queued(input_id)

    def reorder_queued(self, session_id: str, input_ids: list[str]) -> None:
        self._s(session_id).reorder_queued(input_ids)

    def abort(self, session_id: str) -> bool:
        return self._s(session_id).abort()


class ConversationMaintenance:
    """Maintenance commands that extensions register through the SPI (``compact``: /compact)."""

    def __init__(self, rt: AgentRuntime) -> None:
        self._rt = rt

    @property
    def can_compact(self) -> bool:
        return self._rt.registry.command("compact") is not None

    async def compact(self, session_id: str, instructions: str | None = None) -> object:
        command = self._rt.registry.command("compact")
        if command is None:
            raise NotAvailable("no extension provides compaction")
        session = self._rt.open_session(session_id)
        if session.busy:
            raise SessionBusy("compaction runs only when the session is idle")
        return await session.run_command(command, instructions)


class Conversation:
    def __init__(self, rt: AgentRuntime) -> None:
        self.query = ConversationQuery(rt)
        self.lifecycle = ConversationLifecycle(rt)
        self.ingress = ConversationIngress(rt)
        self.maintenance = ConversationMaintenance(rt)
