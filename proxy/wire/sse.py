"""Incremental Server-Sent Events decoder following the WHATWG EventSource parsing rules.

TCP chunks split frames anywhere (inside a UTF-8 character, between CR and LF), so the decoder
keeps only the unfinished line, as a list of pieces: each byte is scanned once and joined once,
which keeps a long stream fed in tiny chunks linear. Lines are decoded to text only when
complete, so a character split across chunks decodes correctly.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\r\n", b"\n", b"\r")


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event. ``event`` is None when the frame had no (or an empty) event field."""

    event: str | None
    data: str
    id: str | None = None


class SSEDecoder:
    """Feed raw bytes, get complete events; ``finish`` flushes an event lacking its blank line."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # pieces of the current unfinished line
        self._skip_lf = False  # the last chunk ended in CR: a leading LF belongs to it
        self._first_line = True
        self._event_type = ""
        self._data: list[str] = []
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode a chunk; return the events it completed."""
        if not chunk:
            return []
        if type(chunk) is not bytes:
            chunk = bytes(chunk)
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:  # fast path: the middle of a long line
            self._pending.append(chunk)
            return []
        events: list[SSEEvent] = []
        lines = chunk.splitlines(keepends=True)  # bytes split only on \r\n, \n and \r
        for line in lines:
            if line.endswith(_LINE_ENDS):
                body = line.rstrip(b"\r\n")
                if self._pending:
                    self._pending.append(body)
                    body = b"".join(self._pending)
                    self._pending = []
                self._line(body, events)
            else:
                self._pending.append(line)
        if lines and lines[-1].endswith(b"\r"):
            self._skip_lf = True
        return events

    def finish(self) -> list[SSEEvent]:
        """End of stream: treat an unfinished line and event as if a blank line followed."""
        events: list[SSEEvent] = []
        if self._pending:
            body = b"".join(self._pending)
            self._pending = []
            self._line(body, events)
        self._line(b"", events)
        self._skip_lf = False
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if self._first_line:
            self._first_line = False
            if raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
        if not raw:
            if self._data:
                events.append(SSEEvent(self._event_type or None, "\n".join(self._data), self._last_id))
            self._data = []
            self._event_type = ""
            return
        if raw[:1] == b":":
            return
        line = raw.decode("utf-8", "replace")
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id" and "\0" not in value:
            self._last_id = value
        # "retry" and unknown fields are ignored, as the spec says.
