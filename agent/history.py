"""The live history of one session: every change is persisted first, then observers are told.

``notify`` is set by the turn runner to dispatch ``on_history_changed`` to the turn's handlers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Literal

from .messages import Message
from .session_store import HistoryFile

Notify = Callable[[Literal["append", "replace"], tuple[Message, ...], int, "str | None"], Awaitable[None]]


class History:
    def __init__(self, messages: Iterable[Message], epoch: int, file: HistoryFile) -> None:
        self._messages = list(messages)
        self.epoch = epoch
        self.file = file
        self.turn: int | None = None
        self.notify: Notify | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def append_now(self, message: Message) -> None:
        """Persist and keep, without telling observers (used while a cancelled turn cleans up)."""
        self.file.append_message(self.epoch, message, self.turn)
        self._messages.append(message)

    async def append(self, message: Message) -> None:
        self.append_now(message)
        if self.notify is not None:
            await self.notify("append", (message,), self.epoch, None)

    async def replace(self, messages: Sequence[Message], reason: str) -> None:
        """Swap the whole history (compaction); starts a new history epoch."""
        self.epoch += 1
        self.file.append_replace(self.epoch, messages, reason, self.turn)
        self._messages = list(messages)
        if self.notify is not None:
            await self.notify("replace", tuple(messages), self.epoch, reason)
