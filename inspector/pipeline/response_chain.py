"""A Responses call that continues a stored response (``previous_response_id``), as the full prompt.

OpenAI's Responses API (and Codex's Responses over WebSocket) lets a call send only its new input
and name the previous response: the provider holds the rest. Compared as sent, every such call is
NOT_COMPARABLE and its tokens count only the new input, though the store holds every call of the
chain. ``full_body`` rebuilds what the provider sees: the previous call's full input, then its
output items, then the new input, under the new call's own instructions, tools and parameters
(instructions do not carry over). The analysis compares and counts that
(docs/architecture.md, "Prefix relations").

The previous call's full body is taken from the analyzer's memory when it holds it (the thread's
latest call keeps its body), else rebuilt from the store link by link, at most ``MAX_LINKS`` back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_LINKS = 512  # links read back from the store to rebuild one chain (a cold start)

# response id -> the call that produced it; call id -> its (full) request body if remembered;
# call id -> (stored request body, final response) from the store.
Producer = Callable[[str], str | None]
Remembered = Callable[[str], Any]
Stored = Callable[[str], tuple[Any, Any]]


def _items(value: Any) -> list | None:
    """A Responses ``input`` as a list of items (a string is one user message); None if neither."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return list(value) if isinstance(value, list) else None


def _output(response: Any) -> list | None:
    output = response.get("output") if isinstance(response, dict) else None
    return list(output) if isinstance(output, list) else None


def full_body(body: Any, producer: Producer, remembered: Remembered, stored: Stored) -> dict | None:
    """``body`` with the conversation its ``previous_response_id`` holds server-side spelled out, and
    no ``previous_response_id``; None when it names none, or a link is missing or unreadable."""
    if not isinstance(body, dict) or not isinstance(body.get("previous_response_id"), str):
        return None
    tail = _items(body.get("input"))
    if tail is None:
        return None
    pending: list[list] = [tail]  # newest first: each link's (output + input) to put after the earlier ones
    prev_id: str | None = body["previous_response_id"]
    head: list = []
    for _ in range(MAX_LINKS):
        if prev_id is None:
            break
        call_id = producer(prev_id)
        if call_id is None:
            return None
        request, response = stored(call_id)
        output = _output(response)
        if output is None:
            return None
        pending.append(output)
        earlier = remembered(call_id)
        if isinstance(earlier, dict) and not isinstance(earlier.get("previous_response_id"), str):
            head = _items(earlier.get("input")) or []
            prev_id = None
            break
        if not isinstance(request, dict):
            return None
        items = _items(request.get("input"))
        if items is None:
            return None
        pending.append(items)
        prev_id = request.get("previous_response_id") if isinstance(request.get("previous_response_id"), str) else None
    if prev_id is not None:
        return None  # longer than MAX_LINKS
    full = [*head]
    for part in reversed(pending):
        full.extend(part)
    out = {k: v for k, v in body.items() if k not in ("previous_response_id", "input")}
    out["input"] = full
    return out
