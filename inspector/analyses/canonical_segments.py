"""One block of a prompt as a canonical segment: what its hash covers, its kind, its text.

``canonical.py`` walks each API's body layout; every content block, part, item, tool call or tool
result it finds becomes a segment here, the same way for every API. ``strip_block`` normalises a block
(cache markers kept aside, nulls and empty lists dropped) before it is hashed; ``SegmentBuilder``
collects the segments and their digests in cache order.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ctxscope.inspector.analyses.canonical_prompt import MARKER_KEYS, Segment, canonical_json, is_reminder

IMAGE_TYPES = {
    "image",
    "document",
    "image_url",
    "input_image",
    "input_file",
    "input_audio",
    "file",
    "container_upload",
}
TEXT_TYPES = {"text", "input_text", "output_text"}


def strip_block(value: Any) -> tuple[Any, dict | None]:
    """A block without markers, nulls or empty lists (nested content too), and its marker."""
    if not isinstance(value, dict):
        return value, None
    marker = None
    out = {}
    for key, v in value.items():
        if key in MARKER_KEYS:
            if v is not None and v is not False:
                marker = v if isinstance(v, dict) else {key: v}
            continue
        if v is None or v == []:
            continue
        if key == "content" and isinstance(v, list):
            items = []
            for item in v:
                item, inner = strip_block(item)
                marker = inner or marker
                items.append(item)
            v = items
        out[key] = v
    return out, marker


def text_block(text: str, typ: str = "text") -> dict:
    return {"type": typ, "text": text}


def nested_text(content: Any) -> tuple[str, int]:
    """Text and image count of a tool result's content (a string or a list of parts)."""
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        return ("" if content is None else canonical_json(content)), 0
    texts, images = [], 0
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            typ = part.get("type")
            if typ in IMAGE_TYPES:
                images += 1
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                texts.append(canonical_json(strip_block(part)[0]))
    return "\n".join(texts), images


class SegmentBuilder:
    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.digests: list[bytes] = []  # the segments' hashes as bytes: the prompt's Hashes without a hex round trip

    def add(
        self,
        pointer: str,
        kind: str,
        role: str | None,
        text: str,
        norm: Any,
        area: str,
        marker: dict | None = None,
        *,
        name: str | None = None,
        ref: str | None = None,
        images: int = 0,
        extras: dict | None = None,
    ) -> None:
        digest = hashlib.sha256(canonical_json([area, role, norm, extras or {}]).encode()).digest()
        self.digests.append(digest)
        self.segments.append(Segment(pointer, kind, role, text, digest.hex(), marker, name, ref, images))

    def text(
        self,
        pointer: str,
        role: str | None,
        text: str,
        norm: Any,
        area: str,
        marker: dict | None = None,
        extras: dict | None = None,
    ) -> None:
        self.add(pointer, text_kind(role, text), role, text, norm, area, marker, extras=extras)

    def tools(self, body: dict, key: str) -> bool:
        tools = body.get(key)
        if tools is None:
            return True
        if not isinstance(tools, list):
            return False
        for i, tool in enumerate(tools):
            norm, marker = strip_block(tool)
            name = None
            if isinstance(tool, dict):
                fn = tool.get("function")
                name = tool.get("name") or (fn.get("name") if isinstance(fn, dict) else None) or tool.get("type")
            self.add(f"/{key}/{i}", "tools", None, canonical_json(norm), norm, "tools", marker, name=name)
        return True


def text_kind(role: str | None, text: str) -> str:
    if role in ("system", "developer"):
        return "system"
    if role == "assistant":
        return "assistant_text"
    if role in ("tool", "function"):
        return "tool_result"
    return "reminder" if is_reminder(text) else "user_text"


def add_block(
    b: SegmentBuilder, pointer: str, role: str | None, block: Any, area: str, extras: dict | None = None
) -> None:
    """One content block / part / item of any of the three APIs."""
    norm, marker = strip_block(block)
    if not isinstance(block, dict):
        text = block if isinstance(block, str) else canonical_json(block)
        b.add(pointer, "other", role, text, norm, area, extras=extras)
        return
    typ = block.get("type") or ""
    if typ in TEXT_TYPES and isinstance(block.get("text"), str):
        b.text(pointer, role, block["text"], norm, area, marker, extras)
    elif typ in IMAGE_TYPES:
        b.add(pointer, "image", role, "", norm, area, marker, images=1, extras=extras)
    elif typ == "refusal":
        b.add(pointer, "assistant_text", role, str(block.get("refusal", "")), norm, area, marker, extras=extras)
    elif typ in ("thinking", "redacted_thinking", "reasoning"):
        thought: Any = block.get("thinking") if typ == "thinking" else None
        if typ == "reasoning":
            parts = (block.get("summary") or []) + (block.get("content") or [])
            thought = "\n".join(p.get("text", "") for p in parts if isinstance(p, dict))
        b.add(pointer, "thinking", role, thought if isinstance(thought, str) else "", norm, area, marker, extras=extras)
    elif typ.endswith(("tool_result", "_call_output")):
        ref = block.get("tool_use_id") or block.get("call_id")
        if isinstance(norm.get("content"), str):  # a string result equals one text block
            norm = dict(norm, content=[text_block(norm["content"])])
        text, images = nested_text(block.get("content", block.get("output")))
        b.add(pointer, "tool_result", role, text, norm, area, marker, ref=ref, images=images, extras=extras)
    elif typ.endswith(("tool_use", "_call")) or typ == "function":
        fn: dict = block["function"] if isinstance(block.get("function"), dict) else {}
        name = block.get("name") or fn.get("name")
        ref = block.get("id") if typ.endswith("tool_use") or typ == "function" else block.get("call_id")
        b.add(pointer, "tool_call", role, canonical_json(norm), norm, area, marker, name=name, ref=ref, extras=extras)
    else:
        b.add(pointer, "other", role, canonical_json(norm), norm, area, marker, extras=extras)
