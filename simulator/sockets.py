"""The Responses API over WebSocket (GET /v1/responses with an upgrade), as Codex and the openai
SDK's ``responses.connect()`` speak it: each ``response.create`` text frame is answered with the
same events a streamed HTTP response carries, one JSON text frame each, in order; a request the
provider refuses gets one ``error`` frame and the socket stays open for the next."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import WSMsgType, web

from ctxscope.simulator.exchange import Refusal, resolve_turn
from ctxscope.simulator.state import STATE_KEY
from ctxscope.simulator.wire.openai_responses import ResponsesWire

RESPONSES = ResponsesWire()
MAX_FRAME = 64 << 20


def _error_frame(status: int, payload: dict[str, Any]) -> str:
    return json.dumps({"type": "error", "status": status, **payload})


async def responses_socket(request: web.Request) -> web.StreamResponse:
    """Answer ``response.create`` frames one after another until the client closes."""
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, autoping=True)
    await ws.prepare(request)
    state = request.app[STATE_KEY]
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            continue
        try:
            event = json.loads(msg.data)
        except ValueError:
            await ws.send_str(_error_frame(400, RESPONSES.error(400, None, "The frame is not valid JSON.", None)))
            continue
        if not isinstance(event, dict) or event.get("type") != "response.create":
            continue  # other client events (response.steer ...) are not modelled
        body = {k: v for k, v in event.items() if k != "type"}
        resolved = await resolve_turn(state, RESPONSES, body, request.headers)
        if isinstance(resolved, Refusal):
            await ws.send_str(_error_frame(resolved.status, resolved.payload))
            continue
        turn, step = resolved
        events = RESPONSES.events(turn)
        if step is not None and step.stream_error is not None:
            cut = min(step.stream_error.after_events or 1, len(events) - 1)
            events = [*events[:cut], RESPONSES.stream_error(turn, step.stream_error, cut)]
        delay = step.chunk_delay_ms / 1000 if step is not None else 0
        for i, item in enumerate(events):
            if i and delay:
                await asyncio.sleep(delay)
            if step is not None and step.reset_after_events is not None and i >= step.reset_after_events:
                if request.transport is not None:
                    request.transport.abort()
                return ws
            try:
                await ws.send_str(json.dumps(item.data, ensure_ascii=False, separators=(",", ":")))
            except ConnectionResetError:  # the client left mid-answer, as clients may
                return ws
    return ws
