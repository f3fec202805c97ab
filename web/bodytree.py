"""A body's outline for the call page's first load, and one node of it by JSON pointer, paged.

A 4M-token prompt is 16 MB of JSON: the page never gets it whole (docs/architecture.md, "A session
opens where its story is"). The outline is the body itself with every long string cut to a
short preview (its full size in ``texts``) and the middle of every long list left out (its place
in ``folds``): a top-level message list keeps the head and tail the page shows unfolded, any
other list its first ``LIST_KEEP`` items. ``node`` then answers one pointer: a string's
characters a page at a time, or a container's own outline (a slice of a list's items when asked).

Pointers are RFC 6901, parsed strictly: a bad escape or a non-numeric list index is a
``BadPointer`` (HTTP 400), a pointer that names nothing a ``NoNode`` (HTTP 404).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PREVIEW_CHARS = 300  # what a cut string keeps
INLINE_CHARS = 600  # strings up to this length are sent whole
MESSAGE_LISTS = ("/messages", "/input", "/contents")  # the page folds these past FOLD_HEAD + FOLD_TAIL
FOLD_HEAD, FOLD_TAIL = 1, 6  # as web/static/reqview.js unfolds them
FOLD_MIN = FOLD_HEAD + FOLD_TAIL + 5
LIST_KEEP = 200  # any other list: its first items
PAGE_CHARS = 65_536  # a text page: at most 256 KiB of UTF-8
PAGE_ITEMS = 100  # a slice of a list's items
MAX_POINTER = 4096


class BadPointer(ValueError):
    """A malformed pointer or paging argument (HTTP 400)."""


class NoNode(LookupError):
    """A well-formed pointer that names nothing in the body (HTTP 404)."""


@dataclass
class Outline:
    """A body's shape: ``tree`` with long strings cut and long lists folded, and what was left out."""

    tree: Any = None
    texts: dict[str, dict] = field(default_factory=dict)  # pointer -> {chars, bytes} of a cut string
    folds: dict[str, dict] = field(default_factory=dict)  # pointer -> {length, from, to}: items [from, to) left out
    sizes: dict[str, int] = field(default_factory=dict)  # message pointer -> characters of text in it

    def as_dict(self) -> dict:
        return {"texts": self.texts, "folds": self.folds, "sizes": self.sizes}


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _chars(value: Any) -> int:
    """Characters of text in a value (strings and keys), without building it as JSON."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + _chars(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    return 0


class _Builder:
    def __init__(self, out: Outline):
        self.out = out

    def walk(self, value: Any, ptr: str) -> Any:
        if isinstance(value, str):
            if len(value) <= INLINE_CHARS:
                return value
            self.out.texts[ptr] = {"chars": len(value), "bytes": len(value.encode("utf-8", "surrogatepass"))}
            return value[:PREVIEW_CHARS]
        if isinstance(value, dict):
            return {k: self.walk(v, f"{ptr}/{escape(k)}") for k, v in value.items()}
        if isinstance(value, list):
            return self.walk_list(value, ptr)
        return value

    def item(self, value: Any, ptr: str, message: bool) -> Any:
        if message:
            self.out.sizes[ptr] = _chars(value)
        return self.walk(value, ptr)

    def walk_list(self, items: list, ptr: str, start: int | None = None, stop: int | None = None) -> list:
        message = ptr in MESSAGE_LISTS
        n = len(items)
        if start is not None:  # a slice asked for by the page: no fold of its own
            stop = min(n, stop if stop is not None else n, start + PAGE_ITEMS)
            return [self.item(items[i], f"{ptr}/{i}", message) for i in range(start, stop)]
        if message and n >= FOLD_MIN:
            keep = list(range(FOLD_HEAD)) + list(range(n - FOLD_TAIL, n))
            self.out.folds[ptr] = {"length": n, "from": FOLD_HEAD, "to": n - FOLD_TAIL}
        elif n > LIST_KEEP:
            keep = list(range(LIST_KEEP))
            self.out.folds[ptr] = {"length": n, "from": LIST_KEEP, "to": n}
        else:
            keep = list(range(n))
        return [self.item(items[i], f"{ptr}/{i}", message) for i in keep]


def outline(body: Any, base: str = "") -> Outline:
    """The outline of ``body`` (or of the node at ``base`` inside it), pointers absolute."""
    out = Outline()
    out.tree = _Builder(out).walk(body, base)
    return out


def parse_pointer(pointer: str) -> list[str]:
    """RFC 6901 tokens; ``BadPointer`` for anything else (a bad ``~`` escape, a missing ``/``)."""
    if len(pointer) > MAX_POINTER:
        raise BadPointer(f"pointer longer than {MAX_POINTER} characters")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise BadPointer("a pointer is empty or starts with /")
    tokens = []
    for raw in pointer[1:].split("/"):
        rest = raw.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise BadPointer(f"bad escape in pointer token {raw[:40]!r}: ~ must be ~0 or ~1")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def resolve(body: Any, pointer: str) -> Any:
    """The value at ``pointer``: ``BadPointer`` when malformed, ``NoNode`` when it names nothing."""
    value = body
    for token in parse_pointer(pointer):
        if isinstance(value, dict):
            if token not in value:
                raise NoNode(f"no key {token[:80]!r} at this pointer")
            value = value[token]
        elif isinstance(value, list):
            if not token.isascii() or not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                raise BadPointer(f"{token[:40]!r} is not a list index")
            index = int(token)
            if index >= len(value):
                raise NoNode(f"index {index} is past the end of a list of {len(value)}")
            value = value[index]
        else:
            raise NoNode("the pointer goes inside a value that is neither an object nor a list")
    return value


def node(body: Any, pointer: str, offset: int = 0, limit: int = PAGE_CHARS, start: int | None = None) -> dict:
    """One node: a page of a string's characters, a slice of a list's items, or a container's outline."""
    value = resolve(body, pointer)
    if isinstance(value, str):
        if offset < 0 or offset > len(value):
            raise BadPointer(f"offset {offset} is outside the text's {len(value)} characters")
        if limit < 1:
            raise BadPointer("limit must be 1 or more")
        end = min(len(value), offset + min(limit, PAGE_CHARS))
        return {
            "pointer": pointer,
            "type": "string",
            "chars": len(value),
            "offset": offset,
            "next_offset": end if end < len(value) else None,
            "text": value[offset:end],
        }
    out = Outline()
    builder = _Builder(out)
    if isinstance(value, list) and start is not None:
        if start < 0 or start > len(value):
            raise BadPointer(f"from {start} is outside the list's {len(value)} items")
        items = builder.walk_list(value, pointer, start, start + min(max(limit, 1), PAGE_ITEMS))
        stop = start + len(items)
        return {
            "pointer": pointer,
            "type": "items",
            "length": len(value),
            "from": start,
            "to": stop,
            "items": items,
            **out.as_dict(),
        }
    tree = builder.walk(value, pointer)
    kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "value"
    return {"pointer": pointer, "type": kind, "tree": tree, **out.as_dict()}
