"""Source marker blocks: what the model is told about where a web or MCP result came from.

The host appends one block per source to such a result (the model's copy only: the structured
references live in ``details``). A marker counts only by identity: the host mints each one with an
unguessable token, remembers the marker object under that token (as MiniMax Code keeps its marker
objects in a WeakSet) and stores the token in the result's details. A block counts as a marker
only when the host holds it for this very tool call and the result ends with exactly its text.
Anything a tool prints that merely looks like a marker is tool output: the host renames its tag
(``<not-a-ctxscope-source``) so the model is not misled, and never reads ids or locators from it.

The tool-output budget calls ``split_host_marker`` so that a receipt keeps the marker when the
result itself goes to an artifact.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ..core.messages import ToolResult
from .refs import SourceReference, clean_title

TAG = "ctxscope-source"
DETAILS_KEY = "source_marker"  # the token of the host's marker on this result
_LOOKALIKE = re.compile(r"<(/?)(\s*)ctxscope-source\b", re.IGNORECASE)
_TRAILING = re.compile(r"(?:\n*<ctxscope-source [^>]*>.*?</ctxscope-source>)+\s*\Z", re.DOTALL)


@dataclass(frozen=True, eq=False)  # compared by identity on purpose
class SourceMarker:
    token: str
    tool_call_id: str
    ref_ids: tuple[str, ...]
    text: str  # exactly what was appended, separator included


def render(refs: Iterable[SourceReference], token: str) -> str:
    """Our block wording: id, kind, locator, title, a short hash, and how to cite it."""
    blocks = []
    for ref in refs:
        blocks.append(
            "\n".join(
                [
                    f'<{TAG} id="{ref.id}" kind="{ref.kind}" mark="{token}">',
                    f"locator: {clean_title(ref.locator, 500)}",
                    f"title: {ref.title}",
                    f"sha256: {ref.sha256[:16]}",
                    f"If your answer uses this result, cite it as [{ref.id}].",
                    f"</{TAG}>",
                ]
            )
        )
    return "\n\n" + "\n".join(blocks)


class MarkerRegistry:
    """The markers this process minted, by token; bounded (a marker matters only until its result is settled)."""

    def __init__(self, capacity: int = 20_000) -> None:
        self.capacity = capacity
        self._markers: OrderedDict[str, SourceMarker] = OrderedDict()
        self._lock = threading.Lock()

    def mint(self, tool_call_id: str, refs: Iterable[SourceReference]) -> SourceMarker:
        refs = tuple(refs)
        token = secrets.token_hex(8)
        marker = SourceMarker(token, tool_call_id, tuple(r.id for r in refs), render(refs, token))
        with self._lock:
            self._markers[token] = marker
            while len(self._markers) > self.capacity:
                self._markers.popitem(last=False)
        return marker

    def owned(self, result: ToolResult) -> SourceMarker | None:
        """The host's marker on this result: minted here, for this call, and exactly at the end of its content."""
        token = (result.details or {}).get(DETAILS_KEY)
        if not isinstance(token, str):
            return None
        with self._lock:
            marker = self._markers.get(token)
        if marker is None or marker.tool_call_id != result.tool_call_id or not result.content.endswith(marker.text):
            return None
        return marker

    def __len__(self) -> int:
        return len(self._markers)


HOST_MARKERS = MarkerRegistry()


def split_host_marker(result: ToolResult, registry: MarkerRegistry = HOST_MARKERS) -> tuple[str, str]:
    """(the result's own text, the host marker appended to it); the marker part is "" when there is none."""
    marker = registry.owned(result)
    if marker is None:
        return result.content, ""
    return result.content[: len(result.content) - len(marker.text)], marker.text


def defang(content: str) -> tuple[str, int]:
    """Rename lookalike marker tags in a tool's own output; returns the text and how many were renamed."""
    if "ctxscope-source" not in content.lower():
        return content, 0
    return _LOOKALIKE.subn(lambda m: f"<{m.group(1)}{m.group(2)}not-a-ctxscope-source", content)


def strip_trailing_markers(content: str) -> str:
    """The text before trailing marker blocks, for re-reading history after a restart (not a trust decision)."""
    return _TRAILING.sub("", content)
