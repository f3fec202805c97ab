"""The live history of one session and its append-only file: every change is persisted first, then observers are told.

``history.jsonl`` is append-only. Message records carry their history epoch; a whole-history
replacement (compaction) is one ``replace`` record that opens the next epoch, so the file keeps
everything that was ever sent while loading yields only the live history. Turn boundaries and
session state changes are records too. A torn last line (crash mid-write) is ignored on load.
``notify`` is set by the turn runner to dispatch ``on_history_changed`` to the turn's handlers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .messages import Message, message_from_dict, message_to_dict


@dataclass(frozen=True)
class TurnRecord:
    turn: int
    source: str
    text: str
    started_at: float
    outcome: str | None = None
    reason: str | None = None
    ended_at: float | None = None


@dataclass
class LoadedHistory:
    messages: list[Message] = field(default_factory=list)
    epoch: int = 0
    turns: list[TurnRecord] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


class HistoryFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"ts": time.time(), **record}, ensure_ascii=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()

    def append_message(self, epoch: int, message: Message, turn: int | None = None) -> None:
        self.append({"type": "message", "epoch": epoch, "turn": turn, "message": message_to_dict(message)})

    def append_replace(self, epoch: int, messages: Iterable[Message], reason: str, turn: int | None = None) -> None:
        self.append(
            {
                "type": "replace",
                "epoch": epoch,
                "turn": turn,
                "reason": reason,
                "messages": [message_to_dict(m) for m in messages],
            }
        )

    def append_state(self, key: str, value: Any) -> None:
        self.append({"type": "state", "key": key, "value": value})

    def append_turn_start(self, turn: int, source: str, text: str) -> None:
        self.append({"type": "turn_start", "turn": turn, "source": source, "text": text})

    def append_turn_end(self, turn: int, outcome: str, reason: str | None) -> None:
        self.append({"type": "turn_end", "turn": turn, "outcome": outcome, "reason": reason})

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn line from a crash mid-write
        return out

    def load(self) -> LoadedHistory:
        h = LoadedHistory()
        turns: dict[int, TurnRecord] = {}
        for r in self.records():
            t = r.get("type")
            if t == "message":
                h.messages.append(message_from_dict(r["message"]))
            elif t == "replace":
                h.messages = [message_from_dict(m) for m in r.get("messages", [])]
                h.epoch = int(r.get("epoch", h.epoch + 1))
            elif t == "state":
                h.state[r["key"]] = r.get("value")
            elif t == "turn_start":
                turns[r["turn"]] = TurnRecord(r["turn"], r.get("source", ""), r.get("text", ""), r.get("ts", 0.0))
            elif t == "turn_end" and r.get("turn") in turns:
                old = turns[r["turn"]]
                turns[r["turn"]] = TurnRecord(
                    old.turn, old.source, old.text, old.started_at, r.get("outcome"), r.get("reason"), r.get("ts")
                )
        h.turns = [turns[k] for k in sorted(turns)]
        return h


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
