"""OpenAI's compaction endpoint, POST /v1/responses/compact: a Responses prompt in, the user's
messages plus one opaque ``compaction`` item out (a ``response.compaction`` object, never streamed)."""

from __future__ import annotations

import base64
from typing import Any

from ctxscope.simulator.model.prompt import Block
from ctxscope.simulator.wire.openai_responses import ResponsesWire
from ctxscope.simulator.wire.turn import Turn


def _user_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw}]}]
    kept = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message":
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            kept.append({"type": "message", "role": "user", "content": content})
    return kept


class CompactWire(ResponsesWire):
    """The summary is the scripted reply's text, carried base64-encoded as the item's content."""

    def wants_stream(self, body: dict[str, Any]) -> bool:
        return False

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        return None

    def response(self, turn: Turn) -> dict[str, Any]:
        item = {
            "id": turn.ids.make("cmp_"),
            "type": "compaction",
            "created_by": "ctxscope-sim",
            "encrypted_content": base64.b64encode(turn.reply.text.encode()).decode(),
        }
        return {
            "id": turn.response_id,
            "object": "response.compaction",
            "created_at": turn.created,
            "output": [*_user_messages(turn.body), item],
            "usage": self._usage(turn),
        }
