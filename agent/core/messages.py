"""The neutral conversation model shared by the loop, the history file and every provider converter.

A message is frozen: extensions and transforms work on copies (``dataclasses.replace``), so a
request view can never alias the persisted history. Roles are ``user``, ``assistant`` and ``tool``
(one ``tool`` message holds every result of one step, in call order); each provider converter maps
that onto its own wire shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Role = Literal["user", "assistant", "tool"]


def new_id(prefix: str = "m") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass(frozen=True)
class TextBlock:
    text: str


@dataclass(frozen=True)
class ThinkingBlock:
    """Model reasoning. Replayed only to the API that produced it (``source``), which checks signatures."""

    thinking: str
    signature: str | None = None
    redacted: str | None = None  # Anthropic redacted_thinking payload
    source: str = ""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None  # the exact JSON text the model produced, replayed as is
    invalid_arguments: str | None = None  # parse error when the model's JSON was broken


@dataclass(frozen=True)
class ToolResult:
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)


Block = TextBlock | ThinkingBlock | ToolCall | ToolResult


@dataclass(frozen=True)
class Message:
    """One history entry. ``meta`` carries host facts (kind, source, genuine user text, usage)."""

    role: Role
    content: tuple[Block, ...]
    id: str = field(default_factory=new_id)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResult))

    def with_meta(self, **meta: Any) -> Message:
        return replace(self, meta={**self.meta, **meta})


def user_message(text: str, **meta: Any) -> Message:
    return Message("user", (TextBlock(text),), meta=meta)


def assistant_message(text: str = "", tool_calls: Iterable[ToolCall] = (), **meta: Any) -> Message:
    blocks: list[Block] = [TextBlock(text)] if text else []
    blocks.extend(tool_calls)
    return Message("assistant", tuple(blocks), meta=meta)


def tool_message(results: Iterable[ToolResult], **meta: Any) -> Message:
    return Message("tool", tuple(results), meta=meta)


def is_empty_answer(message: Message) -> bool:
    """No visible text and no tool call (thinking alone does not count as an answer)."""
    return not message.text.strip() and not message.tool_calls


def without_tool_calls(message: Message) -> Message | None:
    """The answer with its tool calls dropped; None when nothing visible is left."""
    blocks = tuple(b for b in message.content if not isinstance(b, ToolCall))
    if not any(isinstance(b, TextBlock) and b.text for b in blocks):
        return None
    return replace(message, content=blocks)


def replace_text(message: Message, text: str) -> Message:
    """All text blocks replaced by one, at the place of the first; other blocks kept in order."""
    out: list[Block] = []
    placed = False
    for b in message.content:
        if isinstance(b, TextBlock):
            if not placed:
                out.append(TextBlock(text))
                placed = True
        else:
            out.append(b)
    if not placed:
        first_call = next((i for i, b in enumerate(out) if isinstance(b, ToolCall)), len(out))
        out.insert(first_call, TextBlock(text))
    return replace(message, content=tuple(out))


def repair_history(messages: Iterable[Message], reason: str = "interrupted") -> list[Message]:
    """Give every tool call a result: providers reject a tool_use without its tool_result.

    Missing results become error results saying why (e.g. ``cancelled``); a missing tool message
    is inserted right after its assistant message.
    """
    msgs = list(messages)
    out: list[Message] = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        out.append(m)
        i += 1
        calls = m.tool_calls if m.role == "assistant" else ()
        if not calls:
            continue
        nxt = msgs[i] if i < len(msgs) and msgs[i].role == "tool" else None
        have = {r.tool_call_id for r in nxt.tool_results} if nxt else set()
        missing = [missing_result(c, reason) for c in calls if c.id not in have]
        if nxt is not None:
            i += 1
            if missing:
                nxt = replace(nxt, content=nxt.content + tuple(missing))
            out.append(nxt)
        elif missing:
            out.append(tool_message(missing, kind="repair"))
    return out


def missing_result(call: ToolCall, reason: str) -> ToolResult:
    return ToolResult(
        call.id, call.name, f"Error: tool call not executed ({reason}).", is_error=True, details={"reason": reason}
    )


# --- JSON (history.jsonl) -------------------------------------------------------------------------


def _with_set(d: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """Add the optional fields that are set; an unset (None) field stays out of the JSON."""
    d.update((k, v) for k, v in optional.items() if v is not None)
    return d


def block_to_dict(b: Block) -> dict[str, Any]:
    if isinstance(b, TextBlock):
        return {"type": "text", "text": b.text}
    if isinstance(b, ThinkingBlock):
        return _with_set(
            {"type": "thinking", "thinking": b.thinking, "source": b.source}, signature=b.signature, redacted=b.redacted
        )
    if isinstance(b, ToolCall):
        return _with_set(
            {"type": "tool_call", "id": b.id, "name": b.name, "arguments": b.arguments},
            raw_arguments=b.raw_arguments,
            invalid_arguments=b.invalid_arguments,
        )
    if isinstance(b, ToolResult):
        d: dict[str, Any] = {
            "type": "tool_result",
            "tool_call_id": b.tool_call_id,
            "name": b.name,
            "content": b.content,
            "is_error": b.is_error,
        }
        if b.details:
            d["details"] = b.details
        return d
    raise TypeError(f"not a block: {b!r}")


def block_from_dict(d: dict[str, Any]) -> Block:
    t = d.get("type")
    if t == "text":
        return TextBlock(d["text"])
    if t == "thinking":
        return ThinkingBlock(d.get("thinking", ""), d.get("signature"), d.get("redacted"), d.get("source", ""))
    if t == "tool_call":
        return ToolCall(
            d["id"], d["name"], d.get("arguments") or {}, d.get("raw_arguments"), d.get("invalid_arguments")
        )
    if t == "tool_result":
        return ToolResult(
            d["tool_call_id"], d.get("name", ""), d.get("content", ""), bool(d.get("is_error")), d.get("details") or {}
        )
    raise ValueError(f"unknown block type {t!r}")


def message_to_dict(m: Message) -> dict[str, Any]:
    return {"id": m.id, "role": m.role, "content": [block_to_dict(b) for b in m.content], "meta": m.meta}


def message_from_dict(d: dict[str, Any]) -> Message:
    return Message(
        d["role"], tuple(block_from_dict(b) for b in d.get("content", ())), d.get("id") or new_id(), d.get("meta") or {}
    )
