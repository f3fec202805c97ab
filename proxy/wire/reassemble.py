"""What the per-API stream reassemblers share: the handler interface and small readers.

A handler receives each SSE event (with its data parsed as JSON when it is JSON) and, at the end,
``build``s the body the non-streaming API would have returned. Handlers never trust the stream:
missing or mistyped fields are skipped (responses.py skips an event whose handling raised).
"""

from __future__ import annotations

from ctxscope.proxy.wire.sse import SSEEvent

MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError)


def as_dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def index_of(obj: dict, key: str = "index", default: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def error_of(obj: dict) -> dict:
    """The error object inside an error body or event, in the provider's own shape."""
    error = obj.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str):
        return {"message": error}
    return {k: v for k, v in obj.items() if k not in ("type", "sequence_number")} or {"type": "error"}


def first_field(choices: object, key: str) -> str | None:
    """``key`` of the lowest-index choice/candidate."""
    if not isinstance(choices, list):
        return None
    found = [c for c in choices if isinstance(c, dict)]
    if not found:
        return None
    value = min(found, key=lambda c: index_of(c)).get(key)
    return value if isinstance(value, str) else None


def joined(current: object, pieces: list[str]) -> str:
    return (current if isinstance(current, str) else "") + "".join(pieces)


class StreamHandler:
    """Per-API stream state. ``build`` returns (body, stop_reason) and settles ``usage``/``complete``."""

    def __init__(self) -> None:
        self.error: dict | None = None
        self.complete = False
        self.usage: dict | None = None

    def on(self, event: SSEEvent, data: object) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def build(self) -> tuple[dict | None, str | None]:  # pragma: no cover - overridden
        raise NotImplementedError


class GenericStream(StreamHandler):
    """Unknown API: only counts events; complete when it ended on a frame boundary or [DONE]."""

    clean_end = False
    done = False

    def on(self, event: SSEEvent, data: object) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
        elif event.event == "error" and isinstance(data, dict):
            self.error = error_of(data)

    def build(self) -> tuple[dict | None, str | None]:
        self.complete = self.done or self.clean_end
        return None, None
