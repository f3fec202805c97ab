"""Whether an answer already reached the client whole, asked only when a call ends badly.

A client may close its connection the moment it has the last event of a stream (Codex does after
``response.completed``), before the upstream's own end of the body arrives; the daemon's shutdown
may close a connection at that same moment. Neither cuts the answer: the call is ``ok`` (or
``http_error``), not ``client_disconnected`` or ``interrupted`` (docs/architecture.md, "Honest
outcomes"). Only this slow path looks at the bytes: the tail of what was relayed, for a
stream's last event, or their count against the Content-Length.
"""

from __future__ import annotations

from collections.abc import Sequence

TAIL_BYTES = 2048  # a stream's last event fits in this (a Gemini chunk with its finishReason too)
# The last event of each API's stream: OpenAI Chat, Anthropic, OpenAI Responses, Gemini.
_LAST_EVENTS = (
    b"data: [DONE]",
    b"message_stop",
    b'"response.completed"',
    b'"response.incomplete"',
    b'"response.failed"',
    b'"finishReason"',
)


def answered_whole(headers: Sequence[tuple[str, str]], chunks: Sequence[bytes]) -> bool:
    """True when ``chunks`` (the body relayed so far, under response ``headers``) is a whole answer."""
    length = next((value for name, value in headers if name.lower() == "content-length"), None)
    if length is not None:
        try:
            return sum(len(c) for c in chunks) >= int(length)
        except ValueError:
            return False
    tail = b""
    for chunk in reversed(chunks):  # the last TAIL_BYTES, from as few chunks as hold them
        tail = bytes(chunk[-TAIL_BYTES:]) + tail
        if len(tail) >= TAIL_BYTES:
            break
    tail = tail[-TAIL_BYTES:].replace(b"\r\n", b"\n")
    last = tail.rstrip().rsplit(b"\n\n", 1)[-1] if tail.rstrip() else b""
    return any(marker in last for marker in _LAST_EVENTS) if last else False
