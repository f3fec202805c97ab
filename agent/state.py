"""What an extension or tool may see of its session: ids, folders, model facts and keyed session state."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SessionState:
    """Small keyed JSON state (e.g. ``todos``), persisted by the host on every ``set``; reads are copies."""

    def __init__(self, values: dict[str, Any] | None = None,
                 persist: Callable[[str, Any], None] | None = None) -> None:
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
