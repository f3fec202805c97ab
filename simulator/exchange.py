"""Answering one model request: parse, pick the script step, model the cache, send the reply.

The order mirrors a real provider: malformed requests and context overflow are rejected before
anything is generated (an overflow leaves the step queued), scripted errors are answered before
the prompt touches the cache, and streams are written one SSE event per write so they reach the
client in many TCP chunks; a scripted reset aborts the transport instead of ending cleanly.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ctxscope.simulator.model.agentic import agentic_reply
from ctxscope.simulator.model.diagnosis import diagnose
from ctxscope.simulator.model.prompt import PromptError, provider_view
from ctxscope.simulator.model.script import ErrorSpec, Reply, Step, output_tokens
from ctxscope.simulator.state import STATE_KEY, SimulatorState
from ctxscope.simulator.wire.sse import Event
from ctxscope.simulator.wire.turn import Turn, Wire

_SALT = os.urandom(16)  # per process: fingerprints tell keys apart without being a lookup table

# What the intake middleware leaves on each request: the decoded body, and its JSON once parsed.
_RequestKey = getattr(web, "RequestKey", None)  # aiohttp 3.12+; plain names before
BODY_KEY: Any = _RequestKey("ctxscope_sim_body", bytes) if _RequestKey else "ctxscope_sim_body"
JSON_KEY: Any = _RequestKey("ctxscope_sim_json", object) if _RequestKey else "ctxscope_sim_json"


def key_fingerprint(headers: Any) -> str:
    """A short salted hash of the caller's API key: the cache scope (caches are per organisation)."""
    key = headers.get("x-api-key") or headers.get("api-key") or headers.get("authorization") or ""
    return hashlib.sha256(_SALT + key.removeprefix("Bearer ").encode()).hexdigest()[:12] if key else "anonymous"


def _headers(state: SimulatorState, wire: Wire, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {wire.request_id_header: state.ids.make(wire.request_id_prefix), **(extra or {})}


def json_reply(
    state: SimulatorState, wire: Wire, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(payload, status=status, headers=_headers(state, wire, extra))


def error_reply(state: SimulatorState, wire: Wire, spec: ErrorSpec) -> web.Response:
    extra = {"retry-after": f"{spec.retry_after:g}"} if spec.retry_after is not None else None
    return json_reply(state, wire, spec.status, wire.error(spec.status, spec.type, spec.message, spec.code), extra)


def parse_json(body: bytes) -> Any:
    """The JSON in a body, or None when it is not valid JSON."""
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


async def read_json(request: web.Request) -> Any:
    """The request's JSON body (decoded and size-checked by the intake middleware, parsed once),
    or None when it is not valid JSON."""
    if JSON_KEY not in request:
        body = request[BODY_KEY] if BODY_KEY in request else await request.read()
        request[JSON_KEY] = parse_json(body)
    return request[JSON_KEY]


def _cut_point(events: list[Event], spec: ErrorSpec) -> int:
    if spec.after_events is not None:
        return min(spec.after_events, len(events) - 1)
    first_content = next((i for i, e in enumerate(events) if e.content), 0)
    return first_content + 1


async def _stream(
    request: web.Request, state: SimulatorState, wire: Wire, turn: Turn, step: Step | None
) -> web.StreamResponse:
    events = wire.events(turn)
    if step is not None and step.stream_error is not None:
        cut = _cut_point(events, step.stream_error)
        events = events[:cut] + [wire.stream_error(turn, step.stream_error, cut)]
    ctype = getattr(wire, "stream_content_type", "text/event-stream; charset=utf-8")  # Gemini's array form differs
    headers = _headers(state, wire, {"content-type": ctype, "cache-control": "no-cache"})
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    reset_after = step.reset_after_events if step is not None else None
    delay = step.chunk_delay_ms / 1000 if step is not None else 0
    for i, event in enumerate(events):
        if reset_after is not None and i >= reset_after:
            break
        if i and delay:
            await asyncio.sleep(delay)
        await response.write(event.encode())
    if reset_after is not None and request.transport is not None:
        request.transport.abort()  # abrupt close: no terminating chunk, the client sees a broken body
        return response
    await response.write_eof()
    return response


async def _partial_then_reset(
    request: web.Request, state: SimulatorState, wire: Wire, payload: dict[str, Any]
) -> web.StreamResponse:
    data = json.dumps(payload).encode()
    headers = _headers(state, wire, {"content-type": "application/json"})
    response = web.StreamResponse(status=200, headers=headers)
    response.content_length = len(data)
    await response.prepare(request)
    await response.write(data[: len(data) // 2])
    if request.transport is not None:
        request.transport.abort()
    return response


@dataclass(frozen=True)
class Refusal:
    """A request answered with an error before anything is generated: HTTP status, the provider's
    error JSON, extra response headers."""

    status: int
    payload: dict[str, Any]
    headers: dict[str, str] | None = None


async def resolve_turn(
    state: SimulatorState, wire: Wire, body: Any, headers: Any
) -> tuple[Turn, Step | None] | Refusal:
    """Parse a request body, pick its script step, model the cache: the turn to answer, or the
    error a provider would give first. Shared by HTTP and the Responses WebSocket."""
    if not isinstance(body, dict):
        return Refusal(
            400, wire.error(400, "invalid_request_error", "The request body is not a valid JSON object.", None)
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Refusal(400, wire.error(400, "invalid_request_error", "model: Field required", None, "model"))
    try:
        prompt, conversation = wire.prompt(body, state.responses)
    except PromptError as exc:
        return Refusal(400, wire.error(400, "invalid_request_error", str(exc), exc.code))
    if wire.api == "anthropic" and state.provider_itself:  # playing Anthropic's own API (model/prompt.py)
        prompt = provider_view(prompt)

    step = state.peek(prompt.last_text)
    window = step.context_window if step is not None and step.context_window else state.context_window
    if prompt.tokens > window:
        return Refusal(400, wire.overflow(prompt.tokens, window))
    if step is not None:
        state.take(step)
        if step.delay_ms:
            await asyncio.sleep(step.delay_ms / 1000)
        if step.error is not None:
            spec = step.error
            extra = {"retry-after": f"{spec.retry_after:g}"} if spec.retry_after is not None else None
            return Refusal(spec.status, wire.error(spec.status, spec.type, spec.message, spec.code), extra)

    usage = wire.usage(state.cache, key_fingerprint(headers), model, prompt, state.clock())
    if step is None and not state.has_steps() and (agentic := agentic_reply(prompt)) is not None:
        reply = agentic  # docs/architecture.md, "The simulator's agentic answers"
    else:
        reply = Reply.from_step(step, prompt.last_user_text)
    turn = Turn(
        body=body,
        model=model,
        prompt=prompt,
        reply=reply,
        usage=usage,
        output_tokens=output_tokens(reply),
        created=int(time.time()),
        ids=state.ids,
        response_id=state.ids.make(wire.response_id_prefix),
        call_ids=tuple(call.id or state.ids.make(wire.call_id_prefix) for call in reply.tool_calls),
        conversation=conversation,
        diagnosis=diagnose(
            wire.api,
            headers,
            body,
            prompt,
            state.fingerprints,
            pending=step is not None and step.diagnosis_pending,
        ),
    )
    if turn.diagnosis.fingerprint is not None:
        state.remember_fingerprint(turn.response_id, turn.diagnosis.fingerprint)
    remembered = wire.remember(turn)
    if remembered is not None:
        state.remember_response(turn.response_id, remembered)
    return turn, step


async def handle_model_request(request: web.Request, wire: Wire) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    resolved = await resolve_turn(state, wire, await read_json(request), request.headers)
    if isinstance(resolved, Refusal):
        return json_reply(state, wire, resolved.status, resolved.payload, resolved.headers)
    turn, step = resolved
    if wire.wants_stream(turn.body):
        return await _stream(request, state, wire, turn, step)
    if step is not None and step.stream_error is not None:
        return error_reply(state, wire, step.stream_error)
    if step is not None and step.reset_after_events is not None:
        return await _partial_then_reset(request, state, wire, wire.response(turn))
    return json_reply(state, wire, 200, wire.response(turn))
