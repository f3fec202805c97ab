"""Anthropic Messages streams reassembled into the message the non-streaming API returns."""

from __future__ import annotations

import json

from ctxscope.proxy.wire.reassemble import MALFORMED, StreamHandler, as_dict, error_of, index_of, joined
from ctxscope.proxy.wire.sse import SSEEvent

_ANTHROPIC_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("partial_json", "input"),
}


class AnthropicStream(StreamHandler):
    """message_start, content blocks by index, message_delta (usage cumulative), message_stop."""

    def __init__(self) -> None:
        super().__init__()
        self.message: dict | None = None
        self.delta: dict = {}
        self.blocks: dict[int, dict] = {}
        self.pieces: dict[tuple[int, str], list[str]] = {}

    def on(self, event: SSEEvent, data: object) -> None:
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.event
        if kind == "message_start":
            msg = as_dict(data.get("message"))
            self.message = msg
            for i, block in enumerate(msg.get("content") or ()):
                if isinstance(block, dict):
                    self.blocks[i] = dict(block)
            usage = msg.get("usage")
            self.usage = dict(usage) if isinstance(usage, dict) else None
        elif kind == "content_block_start":
            self.blocks[index_of(data, default=len(self.blocks))] = dict(as_dict(data.get("content_block")))
        elif kind == "content_block_delta":
            self._delta(index_of(data, default=max(self.blocks, default=0)), as_dict(data.get("delta")))
        elif kind == "message_delta":
            self.delta.update(as_dict(data.get("delta")))
            usage = data.get("usage")
            if isinstance(usage, dict):  # cumulative: overwrite what is reported (as the SDK does)
                merged = dict(self.usage or {})
                merged.update({k: v for k, v in usage.items() if v is not None})
                self.usage = merged
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            self.error = error_of(data)

    def _delta(self, i: int, delta: dict) -> None:
        block = self.blocks.setdefault(i, {})
        kind = delta.get("type")
        if kind in _ANTHROPIC_DELTAS:
            source, target = _ANTHROPIC_DELTAS[kind]
            text = delta.get(source)
            if isinstance(text, str):
                self.pieces.setdefault((i, target), []).append(text)
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            if not isinstance(block.get("citations"), list):
                block["citations"] = []
            block["citations"].append(delta.get("citation"))

    def build(self) -> tuple[dict | None, str | None]:
        if self.message is None and not self.blocks and not self.delta:
            return None, None
        msg = dict(self.message or {"type": "message", "role": "assistant"})
        msg.update(self.delta)
        content = []
        for i in sorted(self.blocks):
            block = dict(self.blocks[i])
            for field in ("text", "thinking"):
                if (i, field) in self.pieces:
                    block[field] = joined(block.get(field), self.pieces[(i, field)])
            raw = "".join(self.pieces.get((i, "input"), ()))
            if raw.strip():
                try:
                    block["input"] = json.loads(raw)
                except MALFORMED:
                    block["input"] = raw  # cut off or invalid: keep what the model sent
            content.append(block)
        msg["content"] = content
        if self.usage is not None:
            msg["usage"] = self.usage
        stop = msg.get("stop_reason")
        return msg, stop if isinstance(stop, str) else None
