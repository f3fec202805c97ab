"""The canonical prompt's types: segments in cache order, and the text rules they share.

``canonical.py`` builds a ``CanonicalPrompt`` from a request body of any API; everything that
compares prompts (relations, diffs, tokens, cache analysis, markers) reads these types only.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxscope.inspector.analyses.hashes import Hashes
from ctxscope.inspector.analyses.tool_refs import ToolRefs
from ctxscope.inspector.base import json_text

KINDS = (
    "system",
    "tools",
    "user_text",
    "assistant_text",
    "tool_call",
    "tool_result",
    "reminder",
    "image",
    "thinking",
    "other",
)
MARKER_KEYS = ("cache_control", "prompt_cache_breakpoint")
# diagnostics: Anthropic's cache-diagnosis request, which names the previous answer on every call
POLICY_KEYS = ("cache_control", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "diagnostics")
REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


_UNSET = ToolRefs({}, {})  # "compute the refs": a default no prompt keeps


@dataclass(frozen=True)
class Segment:
    """One cacheable unit of the prompt."""

    pointer: str  # RFC 6901 pointer into the actual request body
    kind: str  # one of KINDS
    role: str | None
    text: str  # what tokens are counted on; canonical JSON for structured things
    hash: str  # sha256 hex of the normalised content (markers excluded)
    breakpoint: dict | None = None  # the cache marker on this segment, if any
    name: str | None = None  # tool name (definitions and calls)
    ref: str | None = None  # tool call id linking a call and its result
    images: int = 0  # images/documents inside this segment (counted by estimate)


@dataclass(frozen=True)
class CanonicalPrompt:
    """A prompt as segments in cache order, plus what steers caching and the other parameters.

    ``hashes`` and ``tool_refs`` are derived from the segments; a builder that already has them for
    most segments (incremental.py, from the previous call) passes them in, so a prompt costs about
    its new segments; otherwise they are computed here.
    """

    api: str
    model: str | None
    segments: Sequence[Segment]  # a tuple, or a Chunked one sharing an earlier prompt's (incremental.py)
    cache_policy: dict  # breakpoints (segment index, pointer, ttl), top-level marker, prompt_cache_*
    params: dict  # everything else that is not prompt content (max_tokens, stream, tool_choice ...)
    previous_response_id: str | None = None
    # Left out, both are computed from the segments (``_UNSET``: the marker of that, never stored).
    hashes: Hashes | tuple[str, ...] = field(default=(), kw_only=True, repr=False, compare=False)
    tool_refs: ToolRefs = field(default_factory=lambda: _UNSET, kw_only=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.hashes and self.segments:
            hashes: Hashes | tuple[str, ...] = tuple(s.hash for s in self.segments)
            with contextlib.suppress(ValueError):  # not sha256 digests (hand-made segments): a plain tuple does too
                hashes = Hashes(hashes)
            object.__setattr__(self, "hashes", hashes)
        elif len(self.hashes) != len(self.segments):
            raise ValueError("hashes do not match the segments")
        if self.tool_refs is _UNSET:
            object.__setattr__(self, "tool_refs", ToolRefs.of(self.segments))

    @property
    def server_state(self) -> str | None:
        """Id of server-held context this prompt continues (previous_response_id / conversation)."""
        if self.previous_response_id:
            return self.previous_response_id
        conv = self.params.get("conversation")
        if isinstance(conv, dict):
            conv = conv.get("id")
        return conv if isinstance(conv, str) and conv else None


# json.dumps with arguments builds an encoder on every call: this one is built once.
_CANONICAL = json_text.encoder(sort_keys=True)


def canonical_json(value: Any) -> str:
    return _CANONICAL(value)


def escape(token: Any) -> str:
    """One RFC 6901 reference token."""
    return str(token).replace("~", "~0").replace("/", "~1")


def split_reminders(text: str) -> tuple[list[str], str]:
    """The ``<system-reminder>`` blocks in ``text`` and the text left around them."""
    found = REMINDER_RE.findall(text)
    return found, (REMINDER_RE.sub("", text) if found else text)


def is_reminder(text: str) -> bool:
    """True when ``text`` is nothing but reminder blocks."""
    found, rest = split_reminders(text)
    return bool(found) and not rest.strip()
