"""The captured Anthropic Messages call the benches store: a request body as sent and a small JSON
answer, as the proxy hands an ``Exchange`` to the writer. One builder for the benches that store
sessions through the writer's ingest (``advise_scale``, ``scale_build``, ``analysis``,
``writer_cost``), so they differ only in what they say differently."""

from __future__ import annotations

import json
from typing import Any

from ctxscope.proxy.exchange import Exchange

JSON = ("content-type", "application/json")


def messages_exchange(
    call_id: str,
    raw: bytes,
    started_at: float,
    *,
    usage: dict[str, int],
    content: list[dict[str, Any]],
    response_id: str,
    session: str | None = None,
    model: str = "claude-sonnet-4-5",
    upstream: str = "https://api.anthropic.com",
    client: str = "bench/1.0",
    user_agent: str | None = None,
) -> Exchange:
    """A stored ``POST /v1/messages`` of ``raw``, answered 1 s later with ``content`` and ``usage``
    (``stop_reason`` tool_use), over 1 s more."""
    response = {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use",
        "usage": usage,
    }
    headers = (JSON, ("user-agent", user_agent)) if user_agent else (JSON,)
    return Exchange(
        id=call_id,
        provider="anthropic",
        upstream=upstream,
        method="POST",
        path="/v1/messages",
        query="",
        session_label=session,
        annotations=(),
        request_headers=headers,
        key_fingerprint="f" * 16,
        request_body=raw,
        status=200,
        response_headers=(JSON,),
        response_body=json.dumps(response).encode(),
        started_at=started_at,
        first_byte_at=started_at + 1,
        ended_at=started_at + 2,
        outcome="ok",
        client=client,
    )
