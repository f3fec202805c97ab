"""Per-request metadata inside the prompt: blocks a provider leaves out of its cache key.

Some clients put a value that changes on every request into the prompt itself. Where the provider
knows that block and leaves it out of its cache key, a change there costs nothing and is no break;
where the upstream is anything else (an Anthropic-compatible endpoint, a local proxy), the block is
prompt text like any other, so a change there breaks the cache from that block on
(docs/architecture.md, "Prefix relations").

``KNOWN_BLOCKS`` lists every such block, each with why it is there, who ignores it and the user's
fix where it is a break. ``ProviderItself`` says which upstreams count as the provider itself (by
default: the provider's own API host; each upstream can be set either way in the daemon's
config). ``cache_view`` gives a prompt the hashes its upstream keys its cache on: a known block's
hash is that of its name alone where the upstream ignores the block, so the relation, the thread
key, lineage and the cache prediction all see no change there; ``metadata_changes`` then names the
blocks whose text did change, for the "metadata changed" note.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment
from ctxscope.inspector.analyses.chunked import Chunked
from ctxscope.inspector.analyses.hashes import WIDTH, Hashes
from ctxscope.vocab.apis import Api


@dataclass(frozen=True)
class MetadataBlock:
    """A system block that carries per-request metadata."""

    name: str  # our name for it (findings, notes)
    pattern: re.Pattern[str]  # the whole text of the block
    apis: frozenset[str]  # the APIs whose prompts carry it
    ignored_by: frozenset[str]  # hosts of the provider that leaves it out of its cache key
    fix: str  # what the user sets so the client stops sending it (where it is a break)


KNOWN_BLOCKS: tuple[MetadataBlock, ...] = (
    # Claude Code's first system block, ``x-anthropic-billing-header: cc_version=…; cc_entrypoint=…;
    # cch=<5 hex>;``: attribution for Anthropic's billing. ``cch`` changes on every request. Anthropic's
    # API drops the block from its cache key (Claude Code reads its cache against it every call);
    # Anthropic-compatible endpoints (MiniMax, OpenRouter, Fireworks, local proxies) hash it like any
    # text, so every call misses there. Claude Code leaves the block out with the variable below.
    MetadataBlock(
        "x-anthropic-billing-header",
        # key=value pairs, each ended by ";" but the last: no value holds "=" or ";", so a text
        # matches one way only (no backtracking blow-up on a hostile block)
        re.compile(r"x-anthropic-billing-header:(?: *[A-Za-z0-9_.-]+=[^;=\n]*;)*(?: *[A-Za-z0-9_.-]+=[^;=\n]*)? *\Z"),
        frozenset({Api.ANTHROPIC_MESSAGES, Api.ANTHROPIC_COUNT_TOKENS}),
        frozenset({"api.anthropic.com"}),
        "CLAUDE_CODE_ATTRIBUTION_HEADER=0",
    ),
)
_LEADING = ("tools", "system")
SIMULATOR = "sim"  # what a call to the built-in simulator records as its upstream
MAX_BLOCK_CHARS = 512  # a known block is a short header line; a longer text is never one


@dataclass(frozen=True)
class ProviderItself:
    """Which upstreams count as the provider itself, that is, leave its known metadata blocks out
    of the cache key. An upstream is named as a call records it (its base URL, or ``sim``);
    ``overrides`` (from the daemon's config) win over the default: the provider's own API host,
    and the built-in simulator, which models it (``[provider_itself] sim = false`` makes both
    play an Anthropic-compatible endpoint)."""

    overrides: Mapping[str, bool] = field(default_factory=dict)

    def ignores(self, block: MetadataBlock, upstream: str | None) -> bool:
        if not upstream:
            return False
        found = self.overrides.get(upstream.rstrip("/"))
        if found is not None:
            return found
        if upstream == SIMULATOR:  # the built-in simulator plays the provider's own API (simulator/model/prompt.py)
            return True
        return (urlsplit(upstream).hostname or "") in block.ignored_by

    def to_text(self) -> str:
        """The overrides as one string (the writer child's factory takes strings)."""
        return json.dumps(dict(self.overrides), sort_keys=True)

    @classmethod
    def from_text(cls, text: str | None) -> ProviderItself:
        """The inverse of ``to_text``; empty text: no overrides. Raises ValueError on anything else."""
        if not text:
            return cls()
        data = json.loads(text)
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in data.items()):
            raise ValueError("provider-itself overrides must be a JSON object of upstream -> true/false")
        return cls({k.rstrip("/"): v for k, v in data.items()})


def block_of(segment: Segment, api: str | None) -> MetadataBlock | None:
    """The known metadata block this system segment is, or None."""
    text = segment.text
    if segment.kind != "system" or not text.startswith("x-") or len(text) > MAX_BLOCK_CHARS:  # cheap tests first
        return None
    return next((b for b in KNOWN_BLOCKS if api in b.apis and b.pattern.match(text)), None)


def _leading_blocks(prompt: CanonicalPrompt) -> list[tuple[int, MetadataBlock]]:
    """(segment index, block) of the known blocks among the prompt's leading tools and system segments."""
    out = []
    for i, seg in enumerate(prompt.segments):
        if seg.kind not in _LEADING:
            break
        block = block_of(seg, prompt.api)
        if block is not None:
            out.append((i, block))
    return out


def masked_hash(block: MetadataBlock) -> str:
    """The hash a block has where its provider ignores it: that of its name alone, so every value is equal."""
    return hashlib.sha256(json.dumps(["metadata", block.name]).encode()).hexdigest()


def cache_view(prompt: CanonicalPrompt, upstream: str | None, itself: ProviderItself) -> CanonicalPrompt:
    """``prompt`` with the hashes ``upstream`` keys its cache on: each known block the upstream
    ignores gets its masked hash. The same prompt when nothing is masked (the usual case)."""
    masked = [(i, b) for i, b in _leading_blocks(prompt) if itself.ignores(b, upstream)]
    if not masked:
        return prompt
    # The blocks lie among the leading segments: only those are copied; the rest (a Chunked's shared
    # chunks, the digests after them) stay as they are (chunked.py, hashes.py).
    lead = masked[-1][0] + 1
    head = list(prompt.segments[:lead])
    hashes = prompt.hashes
    digests = bytearray(hashes.digests) if isinstance(hashes, Hashes) else None
    plain = list(hashes[:lead]) if digests is None else []
    for i, block in masked:
        new = masked_hash(block)
        seg = head[i]
        head[i] = Segment(seg.pointer, seg.kind, seg.role, seg.text, new, seg.breakpoint, seg.name, seg.ref, seg.images)
        if digests is not None:
            digests[i * WIDTH : (i + 1) * WIDTH] = bytes.fromhex(new)
        else:
            plain[i] = new
    first = masked[0][0]
    viewed: Hashes | tuple[str, ...]
    if isinstance(hashes, Hashes) and digests is not None:  # it still agrees with its ancestors before the first block
        viewed = Hashes.from_digests(bytes(digests), tuple((serial, min(n, first)) for serial, n in hashes.known))
    else:
        viewed = (*plain, *hashes[lead:])
    return CanonicalPrompt(
        prompt.api,
        prompt.model,
        Chunked.of(tuple(head), prompt.segments[lead:]),
        prompt.cache_policy,
        prompt.params,
        prompt.previous_response_id,
        hashes=viewed,
        tool_refs=prompt.tool_refs,
    )


@dataclass(frozen=True)
class MetadataChange:
    pointer: str  # the block's text in the current body
    block: MetadataBlock


def metadata_changes(prev: CanonicalPrompt, cur: CanonicalPrompt) -> list[MetadataChange]:
    """The known blocks at the same place in both prompts whose text differs, though their hashes
    agree (the upstream ignores them): changed metadata, no break."""
    out = []
    for i, block in _leading_blocks(cur):
        if i >= len(prev.segments) or prev.hashes[i] != cur.hashes[i]:
            continue
        before, now = prev.segments[i], cur.segments[i]
        if before.text != now.text:
            out.append(MetadataChange(_text_pointer(now), block))
    return out


def block_at(prompt: CanonicalPrompt, pointer: str | None) -> MetadataBlock | None:
    """The known block the pointer lies in (a break found there), or None."""
    if not pointer:
        return None
    for i, block in _leading_blocks(prompt):
        seg = prompt.segments[i]
        if pointer == seg.pointer or pointer.startswith(seg.pointer + "/"):
            return block
    return None


def _text_pointer(seg: Segment) -> str:
    return seg.pointer if seg.pointer == "/system" else seg.pointer + "/text"


def note(changes: Sequence[MetadataChange]) -> str | None:
    """The relation's note for changed metadata, None when nothing changed."""
    if not changes:
        return None
    names = ", ".join(f"{c.block.name} at {c.pointer}" for c in changes)
    return f"metadata changed: {names} (not part of the provider's cache key)"
