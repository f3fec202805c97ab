"""A HAR file's ``log.entries`` read one entry at a time, so a file of any size costs about one entry.

The document is walked with a sliding text buffer read in chunks: its structure (the top object,
``log``, the ``entries`` array) by hand, every value with the stdlib's ``raw_decode``, so any
valid JSON is accepted (whitespace, escapes, ``entries`` before or after ``creator``/``pages``)
and the whole file is checked (garbage after it is refused). Each entry comes with its byte
offset and length, so the importer can read it again later without holding it. A value over
``max_value`` bytes, bad JSON or a truncated file is a ``BadExport`` naming the byte offset
(docs/architecture.md, "Export and import go through the writer's ingest").
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ctxscope.inspector.share.exchanges import BadExport
from ctxscope.inspector.share.file_limits import MAX_DEPTH, check_depth, mib

_WS = re.compile(r"[ \t\n\r]*")
_NEAR_END = 16  # a decode error this close to the buffer's end may only mean the value goes on
_DECODER = json.JSONDecoder()
_ENTRY_DEPTH = MAX_DEPTH - 3  # an entry sits inside the document, ``log`` and ``entries``


@dataclass(frozen=True)
class RawEntry:
    n: int
    offset: int  # bytes into the file
    length: int
    entry: Any


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Reader:
    """The file as text, read a chunk at a time; ``at`` is the byte offset of ``buf[pos]``."""

    def __init__(self, f: IO[bytes], max_value: int, chunk: int = 1 << 20):
        self.f, self.max_value, self.chunk = f, max_value, chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.at, self.eof, self.read_bytes, self.fresh = "", 0, 0, False, 0, True

    def more(self) -> bool:
        """Read on (at least as much as the buffer holds, so a big value costs linear time); False at the end."""
        if self.eof:
            return False
        data = self.f.read(max(self.chunk, len(self.buf) - self.pos))
        start = self.read_bytes
        self.read_bytes += len(data)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise BadExport(f"the file is not UTF-8 at byte {start + exc.start}") from None
        if self.fresh and text:
            self.fresh = False
            if text.startswith("\ufeff"):  # a UTF-8 byte order mark, as some tools write
                text, self.at = text[1:], 3
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        self.eof = not data
        return True

    def advance(self, end: int) -> None:
        self.at += _utf8_len(self.buf[self.pos : end])
        self.pos = end

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end of the file)."""
        while True:
            self.advance(_WS.match(self.buf, self.pos).end())  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos : self.pos + 1]

    def expect(self, chars: str, where: str) -> str:
        got = self.peek()
        if not got:
            raise BadExport(f"the file ends at byte {self.at}, inside {where} (truncated?)")
        if got not in chars:
            wanted = " or ".join(repr(c) for c in chars)
            raise BadExport(f"the file is not JSON at byte {self.at}: expected {wanted} in {where}, found {got!r}")
        self.advance(self.pos + 1)
        return got

    def value(self, what: str, depth: int) -> tuple[Any, int, int]:
        """(value, byte offset, byte length) of the next JSON value, read whole but bounded."""
        if not self.peek():
            raise BadExport(f"the file ends at byte {self.at}, before {what} (truncated?)")
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise BadExport(f"the file is nested more than {MAX_DEPTH} levels deep (in {what})") from None
            except json.JSONDecodeError as exc:
                unterminated = exc.msg.startswith("Unterminated string")
                cut = unterminated or exc.pos >= len(self.buf)  # what a truncated file looks like
                if self.eof and cut:
                    raise BadExport(f"the file ends at byte {self.read_bytes}, inside {what} (truncated?)") from None
                if self.eof or not (unterminated or exc.pos >= len(self.buf) - _NEAR_END):
                    at = self.at + _utf8_len(self.buf[self.pos : exc.pos])
                    raise BadExport(f"the file is not JSON at byte {at}: {exc.msg} (in {what})") from None
                self._bounded(what)
                self.more()
                continue
            if _number(value) and not self.eof and len(self.buf) - end < 4:  # "1" may be "1.5e3" read on
                self._bounded(what)
                self.more()
                continue
            offset = self.at
            self.advance(end)
            try:
                check_depth(value, what, depth)
            except BadExport:  # (named as the whole file's depth)
                raise BadExport(f"the file is nested more than {MAX_DEPTH} levels deep (in {what})") from None
            return value, offset, self.at - offset

    def _bounded(self, what: str) -> None:
        if _utf8_len(self.buf[self.pos :]) > self.max_value:
            raise BadExport(f"{what} is over {mib(self.max_value)} (--max-size raises the limit)")


def _key(r: _Reader, where: str) -> str:
    if r.peek() != '"':
        r.expect('"', where)  # raises: the one-line error with the offset
    key, _, _ = r.value(f"a key of {where}", 1)
    r.expect(":", where)
    return str(key)


def _members(r: _Reader, where: str) -> Iterator[str]:
    """The keys of the object starting here, each left for the caller to read its value."""
    r.expect("{", where)
    if r.peek() == "}":
        r.advance(r.pos + 1)
        return
    while True:
        yield _key(r, where)
        if r.expect(",}", where) == "}":
            return


def _entries(r: _Reader) -> Iterator[RawEntry]:
    if r.peek() != "[":
        r.value("log.entries", MAX_DEPTH - 2)
        raise BadExport("not a HAR file: log.entries is not a list")
    r.advance(r.pos + 1)
    if r.peek() == "]":
        r.advance(r.pos + 1)
        return
    n = 0
    while True:
        entry, offset, length = r.value(f"HAR entry {n}", _ENTRY_DEPTH)
        if not isinstance(entry, dict):
            raise BadExport(f"HAR entry {n} is not an object")
        yield RawEntry(n, offset, length, entry)
        n += 1
        if r.expect(",]", "log.entries") == "]":
            return


def _the_member(r: _Reader, where: str, wanted: str, others: str, twice: str, depth: int) -> Iterator[None]:
    """Walk the object starting here: every member but ``wanted`` read past (checked as JSON, up to
    ``depth`` deep; ``others`` names it in an error, a format of ``key``), and once left at
    ``wanted``'s value for the caller to read; a second one is refused with ``twice``."""
    seen = False
    for key in _members(r, where):
        if key != wanted:
            r.value(others.format(key=key[:40]), depth)
            continue
        if seen:
            raise BadExport(f"not a HAR file: {twice}")
        seen = True
        yield


def har_entries(f: IO[bytes], max_value: int, reader: _Reader | None = None) -> Iterator[RawEntry]:
    """Every entry of the HAR in ``f``, in file order, the whole file checked as JSON by the end;
    BadExport (one line, with the byte offset) when it is not JSON, not a HAR, or a value is over
    ``max_value`` bytes. (``reader``: one with a smaller chunk, for the tests.)"""
    r = reader or _Reader(f, max_value)
    seen_entries = False
    for _ in _the_member(r, "the file", "log", "the file's {key!r}", "two logs", MAX_DEPTH - 1):
        if r.peek() != "{":
            r.value("log", MAX_DEPTH - 1)
            raise BadExport("not a HAR file: no log.entries")
        for _ in _the_member(r, "log", "entries", "log.{key}", "two log.entries", MAX_DEPTH - 2):
            seen_entries = True
            yield from _entries(r)
    if r.peek():
        raise BadExport(f"the file is not JSON at byte {r.at}: something follows the document")
    if not seen_entries:
        raise BadExport("not a HAR file: no log.entries")
