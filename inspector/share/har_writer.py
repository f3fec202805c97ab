"""A session's HAR written as a stream: memory bounded by one call, whatever the session's size.

HAR is one JSON document, and writing it as one (``json.dumps`` of every entry) held the whole
file several times over: 432 MB for a 35 MB file, 1.2 GB for 103 MB (``bench/export_memory.py``).
Here the document's head is written, then each entry as it is built from its call, then the tail;
a body's text goes out in 1 MiB chunks, JSON-escaped (or base64'd) a chunk at a time, so neither
the entry nor the body is ever one Python string. The bytes are those ``json.dumps(har_log(...),
ensure_ascii=False, indent=1)`` gave (tests/inspector/test_share_export_stream.py keeps that
writer as the reference).
"""

from __future__ import annotations

import base64
import codecs
import json
import re
import secrets
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from ctxscope.inspector.share.exchanges import Exported
from ctxscope.inspector.share.har import har_entry, har_log

CHUNK = 3 << 18  # 768 KiB: a multiple of 3, so base64 chunks join without padding between them
_INDENT = "   "  # an entry's depth in the document (log, entries, entry) at indent=1


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


class _Placeholders:
    """Bodies of one entry, each named in the entry by a string no other field can hold (a random
    nonce between NULs, which JSON writes as ``\\u0000``), and written where that string stands."""

    def __init__(self) -> None:
        self.nonce = secrets.token_hex(16)
        self.bodies: list[tuple[bytes, bool]] = []
        self.pattern = re.compile(r'"\\u0000' + self.nonce + r':(\d+)\\u0000"')

    def __call__(self, data: bytes, as_base64: bool) -> str:
        self.bodies.append((data, as_base64))
        return f"\x00{self.nonce}:{len(self.bodies) - 1}\x00"


def _write_text(out: BinaryIO, data: bytes, as_base64: bool) -> None:
    """A body as a JSON string, a chunk at a time (the chunks' escapes join to the whole's)."""
    out.write(b'"')
    if as_base64:
        for start in range(0, len(data), CHUNK):
            out.write(base64.b64encode(data[start : start + CHUNK]))
    else:
        decoder = codecs.getincrementaldecoder("utf-8")()
        for start in range(0, len(data), CHUNK):
            out.write(json.dumps(decoder.decode(data[start : start + CHUNK]), ensure_ascii=False)[1:-1].encode())
        decoder.decode(b"", final=True)  # valid UTF-8 (har.is_utf8): nothing held back
    out.write(b'"')


def _write_entry(out: BinaryIO, e: Exported, daemon_url: str | None) -> None:
    bodies = _Placeholders()
    text = _dumps(har_entry(e, daemon_url, bodies)).replace("\n", "\n" + _INDENT)
    at = 0
    for found in bodies.pattern.finditer(text):
        out.write(text[at : found.start()].encode())
        _write_text(out, *bodies.bodies[int(found.group(1))])
        at = found.end()
    out.write(text[at:].encode())


def write_har(out: BinaryIO, calls: Iterable[Exported], version: str, daemon_url: str | None) -> Iterator[str]:
    """Write the HAR of ``calls`` to ``out``, yielding each call id once its entry is written."""
    mark = f"\x00{secrets.token_hex(16)}\x00"
    head, tail = _dumps(har_log([mark], version)).split(_dumps(mark))  # type: ignore[list-item]
    first = True
    for e in calls:
        out.write((head if first else ",\n" + _INDENT).encode())
        first = False
        _write_entry(out, e, daemon_url)
        yield e.exchange.id
    out.write((_dumps(har_log([], version)) if first else tail).encode())
