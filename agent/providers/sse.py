"""A pure Server-Sent Events decoder: ``feed(bytes) -> events``, no sockets.

Follows the WHATWG event-stream rules the providers rely on: frames may span TCP chunks and one
chunk may hold many frames; lines end in CRLF, LF or CR (a CR at a chunk's end waits for a possible
LF); several ``data:`` lines join with newlines; ``:`` lines are comments (pings); one leading BOM
is dropped. The agent keeps its own decoder: it shares no code with the proxy or the simulator.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" when the frame had no event: line
    data: str
    id: str | None = None


class SSEDecoder:
    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._utf8.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        self._buf += text
        return self._drain(final=False)

    def close(self) -> list[SSEEvent]:
        """Flush at end of stream; a last frame missing its blank line is still delivered (lenient)."""
        self._buf += self._utf8.decode(b"", final=True)
        out = self._drain(final=True)
        if self._buf:
            self._line(self._buf, out)
            self._buf = ""
        self._dispatch(out)
        return out

    def _drain(self, final: bool) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        buf, pos = self._buf, 0
        while True:
            m = _EOL.search(buf, pos)
            if m is None:
                break
            if m.group() == "\r" and m.end() == len(buf) and not final:
                break  # maybe the first half of a CRLF split across chunks
            self._line(buf[pos : m.start()], out)
            pos = m.end()
        self._buf = buf[pos:]
        return out

    def _line(self, line: str, out: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(out)
            return
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value

    def _dispatch(self, out: list[SSEEvent]) -> None:
        if self._data:
            out.append(SSEEvent(self._event or "message", "\n".join(self._data), self._id))
        self._event = ""
        self._data = []
