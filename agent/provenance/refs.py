"""Source references: what a tool result (or a user's ``@path``) was taken from, and a session's catalog of them.

A reference is the normalised, provider-neutral record the host keeps in a result's
``details["source_references"]``: a kind (``file``, ``web``, ``mcp``), a locator a person can open
(``src/app.py:10-24``, a URL, an MCP resource), a title, and a SHA-256 of the text the result
carried, so a later reader can tell whether the source changed since. Each reference gets a short
id (``S1``, ``S2``, ...) that is stable within the session: that id is what the model cites. The
same text from the same place twice (a file read again, unchanged) is one source, not two.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

FILE, WEB, MCP = "file", "web", "mcp"
KINDS = (FILE, WEB, MCP)
TITLE_MAX = 120


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def clean_title(text: str, limit: int = TITLE_MAX) -> str:
    """One line, no angle brackets or quotes (titles come from untrusted output and end up inside a marker)."""
    one = " ".join(str(text).replace("<", " ").replace(">", " ").replace('"', "'").split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def norm_path(path: str) -> str:
    """The form paths are compared in: forward slashes, no ``./``, no trailing slash."""
    p = posixpath.normpath(str(path).replace("\\", "/"))
    return "" if p == "." else p


def file_locator(path: str, lines: tuple[int, int] | None) -> str:
    if not lines:
        return path
    first, last = lines
    return f"{path}:{first}" if first == last else f"{path}:{first}-{last}"


@dataclass(frozen=True)
class SourceReference:
    """One source, as stored in ``details["source_references"]`` (``id`` is "" until the catalog assigns one)."""

    kind: str
    locator: str
    title: str
    sha256: str
    id: str = ""
    origin: str = "tool"  # tool | user
    tool: str = ""
    path: str | None = None
    lines: tuple[int, int] | None = None
    url: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.locator, self.sha256

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "locator": self.locator,
            "title": self.title,
            "sha256": self.sha256,
            "origin": self.origin,
        }
        if self.tool:
            d["tool"] = self.tool
        if self.path is not None:
            d["path"] = self.path
        if self.lines is not None:
            d["lines"] = list(self.lines)
        if self.url is not None:
            d["url"] = self.url
        return d

    @classmethod
    def from_dict(cls, d: Any) -> SourceReference | None:
        """A reference read back from history; None for anything malformed."""
        if not isinstance(d, dict):
            return None
        try:
            kind, locator, sha = str(d["kind"]), str(d["locator"]), str(d["sha256"])
            lines = d.get("lines")
            span = (int(lines[0]), int(lines[1])) if isinstance(lines, (list, tuple)) and len(lines) == 2 else None
            return cls(
                kind,
                locator,
                str(d.get("title", "")),
                sha,
                str(d.get("id", "")),
                str(d.get("origin", "tool")),
                str(d.get("tool", "")),
                d.get("path"),
                span,
                d.get("url"),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _id_number(ref_id: str) -> int:
    return int(ref_id[1:]) if len(ref_id) > 1 and ref_id[0] == "S" and ref_id[1:].isdigit() else 0


class SourceCatalog:
    """The sources of one session: ids in order of first sight, looked up by id, path or URL."""

    def __init__(self) -> None:
        self._by_id: dict[str, SourceReference] = {}
        self._by_key: dict[tuple[str, str, str], str] = {}
        self._by_path: dict[str, list[str]] = {}
        self._by_url: dict[str, list[str]] = {}
        self._next = 1

    def add(self, ref: SourceReference) -> tuple[SourceReference, bool]:
        """The reference with its id (an existing one when the same source was seen before), and whether it is new."""
        known = self._by_key.get(ref.key)
        if known is not None:
            return replace(ref, id=known), False
        ref = replace(ref, id=f"S{self._next}")
        self._next += 1
        self._remember(ref)
        return ref, True

    def restore(self, ref: SourceReference) -> bool:
        """Take back a reference (with its id) from history; False when its id or source is already known."""
        if not _id_number(ref.id) or ref.id in self._by_id or ref.key in self._by_key:
            return False
        self._next = max(self._next, _id_number(ref.id) + 1)
        self._remember(ref)
        return True

    def _remember(self, ref: SourceReference) -> None:
        self._by_id[ref.id] = ref
        self._by_key[ref.key] = ref.id
        if ref.path:
            self._by_path.setdefault(norm_path(ref.path), []).append(ref.id)
        if ref.url:
            self._by_url.setdefault(ref.url.rstrip("/"), []).append(ref.id)

    def get(self, ref_id: str) -> SourceReference | None:
        return self._by_id.get(ref_id)

    def by_path(self, path: str) -> list[SourceReference]:
        return [self._by_id[i] for i in self._by_path.get(norm_path(path), ())]

    def by_url(self, url: str) -> list[SourceReference]:
        return [self._by_id[i] for i in self._by_url.get(url.rstrip("/"), ())]

    @property
    def paths(self) -> Iterable[str]:
        return self._by_path.keys()

    @property
    def urls(self) -> Iterable[str]:
        return self._by_url.keys()

    def kinds(self) -> list[str]:
        present = {r.kind for r in self._by_id.values()}
        return [k for k in KINDS if k in present] + sorted(present - set(KINDS))

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[SourceReference]:
        return iter(self._by_id.values())
