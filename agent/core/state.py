"""What an extension or tool may see of its session: ids, folders, model facts and keyed session state.

The todo list (key ``todos``, written by the todowrite tool) is read by reminders and compaction,
so its shape and rendering live here, beside the state that holds it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SessionState:
    """Small keyed JSON state (e.g. ``todos``), persisted by the host on every ``set``; reads are copies."""

    def __init__(self, values: dict[str, Any] | None = None, persist: Callable[[str, Any], None] | None = None) -> None:
        self._values = copy.deepcopy(values or {})
        self._persist = persist

    def get(self, key: str, default: Any = None) -> Any:
        return copy.deepcopy(self._values.get(key, default))

    def set(self, key: str, value: Any) -> None:
        json.dumps(value)  # must be JSON: it goes to history.jsonl
        self._values[key] = copy.deepcopy(value)
        if self._persist is not None:
            self._persist(key, copy.deepcopy(value))

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self._values)


@dataclass(frozen=True)
class ModelInfo:
    provider: str
    api: str
    model: str
    context_window: int
    max_output_tokens: int


@dataclass(frozen=True)
class SessionView:
    id: str
    dir: Path
    artifacts_dir: Path
    workspace: Path
    state: SessionState
    model: ModelInfo


MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[-]"}


def open_todos(todos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in todos if t.get("status") in ("pending", "in_progress")]


def render_todos(todos: list[dict[str, Any]]) -> str:
    if not todos:
        return "(todo list is empty)"
    return "\n".join(f"{MARKS[t['status']]} {t['content']}" for t in todos)
