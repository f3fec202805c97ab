"""What reading an imported file may cost: its decoded size, one line's size and its nesting depth.

A file to import is hostile input: a 32 KB zstd bundle can decode to gigabytes, and JSON nested a
million deep ends Python's parser in a RecursionError. The bundle is decompressed as a stream
that stops at ``max_bytes``; a HAR is read an entry at a time, whatever its size, and one call's
record (a HAR entry, a bundle line) is refused over ``line_cap``; every JSON value is parsed with
its depth bounded. Each overstep is a ``BadExport`` with a one-line
message (docs/architecture.md, "Export and import go through the writer's ingest").
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from ctxscope.inspector.share.exchanges import BadExport

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_IMPORT_BYTES = 256 << 20  # a bundle's decoded size (``ctxscope import --max-size`` changes it)
MAX_DEPTH = 64  # an export's JSON is a dozen levels deep; a body inside one is text, not nesting


def line_cap(max_bytes: int) -> int:
    """The longest record (a bundle's line, a HAR's entry) ``max_bytes`` allows: a quarter of it
    (64 MiB by default), so a bomb that is one endless record holds no more than that in memory."""
    return max(1 << 20, max_bytes // 4)


def mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


class CappedStream(io.RawIOBase):
    """A binary stream that raises BadExport once more than ``cap`` bytes were read from it."""

    def __init__(self, inner: io.BufferedIOBase, cap: int, what: str):
        self.inner, self.cap, self.what, self.total = inner, cap, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        n = self.inner.readinto(buffer) or 0
        self.total += n
        if self.total > self.cap:
            raise BadExport(f"{self.what} decodes to more than {mib(self.cap)} (--max-size raises the limit)")
        return n

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            super().close()


def check_depth(doc: Any, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``doc`` when no list or object in it is nested deeper than ``max_depth``; BadExport if one is."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > max_depth:
            raise BadExport(f"{what} is nested more than {max_depth} levels deep")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return doc


def parse_json(data: bytes | str, what: str) -> Any:
    """``data`` parsed, with its depth bounded; BadExport (one line) when it is not JSON or too deep."""
    try:
        doc = json.loads(data)
    except RecursionError:  # deeper than the parser's own stack: far past MAX_DEPTH
        raise BadExport(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadExport(f"{what} is not JSON: {exc}") from None
    return check_depth(doc, what)
