"""The simulator's log of provider requests: bounded, with credentials redacted.

Tests and scripts read it (GET /_sim/requests) to see what a client sent. Small bodies are kept
parsed, as sent; a large one only as a summary (its size, sha256, model and message count), so
a few huge prompts cannot hold hundreds of megabytes. The log keeps the newest entries, at most
MAX_ENTRIES of them and MAX_BYTES of bodies and headers in all.
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
from typing import Any

MAX_ENTRIES = 1000  # a long `ctxscope sim` session must not grow without bound
MAX_BYTES = 32 << 20
MAX_KEPT_BODY = 1 << 20  # bodies up to this size are logged whole (parsed); larger ones summarised
_ENTRY_OVERHEAD = 256  # what an entry costs beyond its body and headers, roughly


def body_for_log(raw: bytes, parsed: Any) -> tuple[Any, int]:
    """(what the log keeps of a decoded body, the bytes that costs): the parsed JSON (or text) of a
    small body, else a summary."""
    if len(raw) <= MAX_KEPT_BODY:
        if parsed is not None:
            return parsed, len(raw)
        return (raw.decode("utf-8", "replace") if raw else None), len(raw)
    summary: dict[str, Any] = {"summarized": True, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    if isinstance(parsed, dict):
        model = parsed.get("model")
        summary["model"] = model if isinstance(model, str) else None
        items = parsed.get("messages", parsed.get("input"))
        summary["messages"] = len(items) if isinstance(items, list) else None
    return summary, _ENTRY_OVERHEAD


def entry_cost(entry: dict[str, Any]) -> int:
    """A rough size of an entry given without its cost (small ad-hoc entries)."""
    return len(json.dumps(entry, default=str))


class RequestLog:
    """Newest-last list of request summaries, bounded by count and by bytes; thread-safe."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: collections.deque[tuple[dict[str, Any], int]] = collections.deque()
        self._bytes = 0

    def add(self, entry: dict[str, Any], cost: int | None = None) -> None:
        cost = entry_cost(entry) if cost is None else cost
        with self._lock:
            self._entries.append((entry, cost))
            self._bytes += cost
            while len(self._entries) > self.max_entries or (self._bytes > self.max_bytes and len(self._entries) > 1):
                _, dropped = self._entries.popleft()
                self._bytes -= dropped

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry, _ in self._entries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes
