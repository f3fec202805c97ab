"""Server-sent event frames and the deterministic splitting of generated text into deltas."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One SSE frame. `name` None means no `event:` line (Chat Completions); `content` marks a
    frame that carries generated content, so a scripted in-stream error lands after some."""

    data: Any
    name: str | None = None
    content: bool = False

    def encode(self) -> bytes:
        payload = (
            self.data
            if isinstance(self.data, str)
            else json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))
        )
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {payload}\n\n".encode()


_WORD = re.compile(r"\s*\S+\s*|\s+")


def split_text(text: str, words_per_piece: int = 3) -> list[str]:
    """Split text into small pieces of a few words each; joining them gives the text back."""
    words = _WORD.findall(text)
    return ["".join(words[i : i + words_per_piece]) for i in range(0, len(words), words_per_piece)]


def split_json(text: str, pieces: int = 3) -> list[str]:
    """Split a JSON string into a few fragments (as models stream tool arguments)."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]
