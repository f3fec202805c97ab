"""How big the next request is: a local o200k estimate, and the provider's own figure when we can trust it.

The local estimate counts the system prompt, the tool declarations as JSON and each message's
projection (text, thinking, tool-call arguments, tool-result text, a fixed cost per media item).
Characters divided by four would underestimate Chinese several-fold, so we count real tokens
(cached per text: the history is re-estimated before every request).

The usage anchor is the provider-reported usage of the last answer: it covers everything up to
and including that answer, so ``anchor total + estimate of the messages after it`` is a better
figure than the estimate alone — as long as it describes *this* history. It is bound to provider,
API, model and the hash of system prompt + tools, and to the history epoch; a replacement starts a
new epoch and invalidates it. A summary that keeps a tail of old messages records
``kept_message_count`` so anchors inside that tail (answers that saw the pre-compaction context)
are skipped; summaries without it (legacy) fall back to timestamps.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxscope.vocab.tokens import count_tokens

from .messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from .model import ToolSpec

MESSAGE_OVERHEAD = 4  # role and framing tokens per message
IMAGE_TOKENS = 1600  # a typical screenshot (about 1.2 megapixels at 750 px per token)
VIDEO_TOKENS = 6400
SUMMARY_KIND = "compaction_summary"


@functools.lru_cache(maxsize=8192)
def text_tokens(text: str) -> int:
    return count_tokens(text)


def media_items(result: ToolResult) -> list[Mapping[str, Any]]:
    """Media attached to a tool result (``details["media"]``: [{type: image|video, origin?, ...}])."""
    media = result.details.get("media") if isinstance(result.details, dict) else None
    return [m for m in media if isinstance(m, Mapping)] if isinstance(media, list) else []


def media_tokens(result: ToolResult) -> int:
    return sum(VIDEO_TOKENS if m.get("type") == "video" else IMAGE_TOKENS for m in media_items(result))


def projection(message: Message) -> str:
    """The text of a message that costs tokens, roughly as every provider serialises it."""
    parts: list[str] = [message.role]
    for b in message.content:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ThinkingBlock):
            parts.append(b.thinking or b.redacted or "")
        elif isinstance(b, ToolCall):
            args = b.raw_arguments if b.raw_arguments is not None else json.dumps(b.arguments, ensure_ascii=False)
            parts.append(f"{b.name} {args}")
        elif isinstance(b, ToolResult):
            parts.append(f"{b.name} {b.content}")
    return "\n".join(parts)


def message_tokens(message: Message) -> int:
    media = sum(media_tokens(b) for b in message.content if isinstance(b, ToolResult))
    return text_tokens(projection(message)) + MESSAGE_OVERHEAD + media


def messages_tokens(messages: Iterable[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def tools_json(tools: Sequence[ToolSpec]) -> str:
    return json.dumps(
        [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in tools],
        ensure_ascii=False,
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Estimate:
    system: int
    tools: int
    messages: int

    @property
    def total(self) -> int:
        return self.system + self.tools + self.messages


def estimate_request(system: str, tools: Sequence[ToolSpec], messages: Iterable[Message]) -> Estimate:
    return Estimate(
        text_tokens(system) if system else 0, text_tokens(tools_json(tools)) if tools else 0, messages_tokens(messages)
    )


def rough_bytes(system: str, tools: Sequence[ToolSpec], messages: Iterable[Message]) -> int:
    """An upper bound of the serialized body size (UTF-8 worst case), cheap enough for every request."""
    chars = len(system) + len(tools_json(tools)) + sum(len(projection(m)) + 64 for m in messages)
    return 4 * chars


# --- the usage anchor ------------------------------------------------------------------------------


def prefix_hash(system: str, tools: Sequence[ToolSpec]) -> str:
    return hashlib.sha256(f"{system}\x00{tools_json(tools)}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class AnchorBinding:
    provider: str
    api: str
    model: str
    prefix_hash: str


@dataclass(frozen=True)
class UsageAnchor:
    binding: AnchorBinding
    epoch: int | None
    message_id: str  # the answer the usage belongs to
    input_tokens: int  # everything the provider read: uncached + cache read + cache write
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    at: float = 0.0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> UsageAnchor | None:
        if not isinstance(d, Mapping):
            return None
        try:
            b = d["binding"]
            return cls(
                AnchorBinding(b["provider"], b["api"], b["model"], b["prefix_hash"]),
                d.get("epoch"),
                d["message_id"],
                int(d["input_tokens"]),
                int(d["output_tokens"]),
                int(d.get("cache_read_tokens") or 0),
                int(d.get("cache_write_tokens") or 0),
                float(d.get("at") or 0.0),
            )
        except (KeyError, TypeError, ValueError):
            return None


def anchor_index(messages: Sequence[Message], anchor: UsageAnchor) -> int | None:
    """Where the anchor's answer sits in ``messages``, or None when the anchor does not describe them."""
    idx = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id == anchor.message_id), None)
    if idx is None:
        return None
    for i in range(len(messages) - 1, -1, -1):
        meta = messages[i].meta
        if meta.get("kind") != SUMMARY_KIND:
            continue
        kept = meta.get("kept_message_count")
        if kept is not None:
            if isinstance(kept, bool) or not isinstance(kept, int) or kept < 0:
                return None
            # kept messages follow the summary; only answers appended after them saw the new context
            return idx if idx >= i + 1 + kept else None
        compacted_at = meta.get("compacted_at")  # legacy: no retained-tail boundary recorded
        if not isinstance(compacted_at, (int, float)) or not math.isfinite(compacted_at):
            return None
        return idx if idx > i and anchor.at > compacted_at else None
    return idx


@dataclass(frozen=True)
class Footprint:
    local: int
    anchored: int | None  # anchor total + estimate after it, when the anchor is valid

    @property
    def tokens(self) -> int:
        return max(self.local, self.anchored or 0)

    @property
    def source(self) -> str:
        return "PROVIDER_USAGE_ANCHORED" if self.anchored is not None else "LOCAL_ESTIMATE"


def valid_anchor_index(
    messages: Sequence[Message], anchor: UsageAnchor | None, binding: AnchorBinding | None, epoch: int | None
) -> int | None:
    if anchor is None or binding is None or anchor.binding != binding:
        return None
    if epoch is not None and anchor.epoch is not None and anchor.epoch != epoch:
        return None
    return anchor_index(messages, anchor)


def footprint(
    system: str,
    tools: Sequence[ToolSpec],
    messages: Sequence[Message],
    anchor: UsageAnchor | None = None,
    binding: AnchorBinding | None = None,
    epoch: int | None = None,
) -> Footprint:
    """max(local estimate, anchor usage + estimate of the messages after the anchor).

    (docs/architecture.md, "Estimating a request")
    """
    local = estimate_request(system, tools, messages).total
    idx = valid_anchor_index(messages, anchor, binding, epoch)
    if idx is None or anchor is None:
        return Footprint(local, None)
    return Footprint(local, anchor.total + messages_tokens(messages[idx + 1 :]))
