"""The provider simulator's aiohttp application: provider routes plus /_sim control endpoints.

Provider routes (with and without the /v1 prefix, as real providers and SDK base URLs differ):
POST /v1/messages, /v1/messages/count_tokens (Anthropic), /v1/chat/completions, /v1/responses,
/v1/responses/compact (OpenAI), /v1beta/models/{model}:generateContent and
:streamGenerateContent (Gemini), GET /v1/models[/{id}] (Anthropic's list shape when an
`anthropic-version` header is sent, OpenAI's otherwise), and the Responses WebSocket (GET
/v1/responses, see `sockets.py`). Replies come from the script queue (see
`model/script.py` for the step
schema). Control: POST /_sim/script (a list replaces the queue, {"append": [...]} extends it;
GET shows it), GET /_sim/requests (the provider requests received: method, path, query and
headers with credentials redacted, the parsed body or a summary of a large one; see
`control/requestlog.py`), POST /_sim/reset (queue, log, cache), GET/POST /_sim/config
({"context_window": N, "clock": unix seconds the prompt cache sees, or null for real time,
"provider_itself": false to key Claude Code's billing header like an Anthropic-compatible endpoint}). Only a
loopback, same-origin caller with the token may use them (`control/access.py`); `control/client.py`'s
`SimulatorControl` is the client.

Bodies are read and decoded here, not by aiohttp (serve the app with `make_runner`): a body over
``max_body`` (sent or decoded) gets a 413 and an undecodable one a 400, both in the provider's
own error shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from ctxscope.simulator.body import BodyError, decode, read_raw
from ctxscope.simulator.control.access import refusal
from ctxscope.simulator.control.redact import redacted_headers, redacted_query
from ctxscope.simulator.control.requestlog import body_for_log
from ctxscope.simulator.exchange import (
    BODY_KEY,
    JSON_KEY,
    handle_model_request,
    json_reply,
    key_fingerprint,
    parse_json,
    read_json,
)
from ctxscope.simulator.model.prompt import PromptError
from ctxscope.simulator.model.script import ScriptError
from ctxscope.simulator.sockets import responses_socket
from ctxscope.simulator.state import STATE_KEY, SimulatorState
from ctxscope.simulator.wire.anthropic import AnthropicWire
from ctxscope.simulator.wire.gemini import GeminiWire
from ctxscope.simulator.wire.openai_chat import ChatWire
from ctxscope.simulator.wire.openai_compact import CompactWire
from ctxscope.simulator.wire.openai_responses import ResponsesWire

__all__ = ["STATE_KEY", "SimulatorState", "create_app", "make_runner", "start_simulator"]

MAX_BODY = 64 << 20  # bytes of a request body, as sent and once decoded
MAX_BODY_KEY = web.AppKey("ctxscope_simulator_max_body", int)

ANTHROPIC, CHAT, RESPONSES = AnthropicWire(), ChatWire(), ResponsesWire()
COMPACT = CompactWire()
GEMINI = {None: GeminiWire(), "sse": GeminiWire("sse"), "array": GeminiWire("array")}

OPENAI_MODELS = ("gpt-5", "gpt-5-mini", "gpt-4.1", "gpt-4o", "gpt-4o-mini", "gpt-sim")
ANTHROPIC_MODELS = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-sim")
_MODEL_CREATED = 1_735_689_600  # 2025-01-01, fixed so listings are deterministic


def _is_control(request: web.Request) -> bool:
    route = request.match_info.route
    resource = route.resource if route is not None else None
    canonical = resource.canonical if resource is not None else ""
    return request.path.startswith("/_sim") or canonical.startswith("/_sim")


def _body_error(request: web.Request, control: bool, exc: BodyError) -> web.Response:
    """A refused body in the shape its caller expects: Anthropic's on /messages, OpenAI's elsewhere."""
    if control:
        return web.json_response({"error": exc.message}, status=exc.status)
    wire = ANTHROPIC if "/messages" in request.path or "anthropic-version" in request.headers else CHAT
    etype = "request_too_large" if exc.status == 413 and wire is ANTHROPIC else "invalid_request_error"
    code = "request_too_large" if exc.status == 413 and wire is not ANTHROPIC else None
    return json_reply(request.app[STATE_KEY], wire, exc.status, wire.error(exc.status, etype, exc.message, code))


@web.middleware
async def _intake(request: web.Request, handler: Any) -> web.StreamResponse:
    """Check control requests, read and decode every body within the limit, log provider requests."""
    state = request.app[STATE_KEY]
    control = _is_control(request)
    if control:
        refused = refusal(request, state.control_token)
        if refused is not None:
            return refused
    limit = request.app[MAX_BODY_KEY]
    try:
        raw = await read_raw(request, limit)
        body = decode(raw, request.headers.get("Content-Encoding", ""), limit) if raw else raw
    except BodyError as exc:
        if not control:
            _log(request, None, {"refused": exc.message, "status": exc.status}, 0)
        return _body_error(request, control, exc)
    request[BODY_KEY] = body
    if not control:
        parsed = request[JSON_KEY] = parse_json(body)
        kept, cost = body_for_log(body, parsed)
        _log(request, len(body), kept, cost)
    return await handler(request)


def _log(request: web.Request, size: int | None, body: Any, cost: int) -> None:
    headers = redacted_headers(request.headers)
    request.app[STATE_KEY].log(
        {
            "method": request.method,
            "path": request.path,
            "query": redacted_query(request.query_string),
            "headers": headers,
            "key_fingerprint": key_fingerprint(request.headers),
            "body": body,
            "bytes": size,
            "received_at": time.time(),
        },
        cost + 256 + len(request.path) + len(request.query_string) + sum(len(k) + len(v) for k, v in headers.items()),
    )


async def _messages(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, ANTHROPIC)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, CHAT)


async def _responses(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, RESPONSES)


async def _compact(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, COMPACT)


async def _gemini(request: web.Request) -> web.StreamResponse:
    """``models/{model}:generateContent`` or ``:streamGenerateContent`` (SSE with ``alt=sse``, else a JSON array)."""
    model, _, method = request.match_info["target"].partition(":")
    if method not in ("generateContent", "streamGenerateContent"):
        raise web.HTTPNotFound()
    wire = GEMINI[None if method == "generateContent" else "sse" if request.query.get("alt") == "sse" else "array"]
    body = await read_json(request)
    if isinstance(body, dict) and model:
        request[JSON_KEY] = {**body, "model": model}  # the wire reads the model from the body
    return await handle_model_request(request, wire)


async def _count_tokens(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    body = await read_json(request)
    if not isinstance(body, dict):
        return json_reply(
            state, ANTHROPIC, 400, ANTHROPIC.error(400, None, "The request body is not a valid JSON object.", None)
        )
    try:
        prompt, _ = ANTHROPIC.prompt(body, {})
    except PromptError as exc:
        return json_reply(state, ANTHROPIC, 400, ANTHROPIC.error(400, None, str(exc), None))
    return json_reply(state, ANTHROPIC, 200, ANTHROPIC.count_tokens(prompt))


def _anthropic_model(name: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": name,
        "display_name": name.replace("-", " ").title(),
        "created_at": "2025-01-01T00:00:00Z",
    }


def _openai_model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": _MODEL_CREATED, "owned_by": "ctxscope-sim"}


async def _models(request: web.Request) -> web.Response:
    if "anthropic-version" in request.headers:
        data = [_anthropic_model(m) for m in ANTHROPIC_MODELS]
        return web.json_response(
            {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
        )
    return web.json_response({"object": "list", "data": [_openai_model(m) for m in OPENAI_MODELS]})


async def _model(request: web.Request) -> web.Response:
    name = request.match_info["model_id"]
    if "anthropic-version" in request.headers:
        return web.json_response(_anthropic_model(name))
    return web.json_response(_openai_model(name))


# ---------------------------------------------------------------- control endpoints


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def _set_script(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    body = await read_json(request)
    try:
        if isinstance(body, dict) and set(body) == {"append"}:
            state.append_script(body["append"])
        else:
            state.set_script(body)
    except ScriptError as exc:
        return _bad(str(exc))
    return web.json_response({"queued": len(state.pending())})


async def _get_script(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].pending())


async def _requests(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].requests())


async def _reset(request: web.Request) -> web.Response:
    request.app[STATE_KEY].reset()
    return web.json_response({"ok": True})


def _fixed(at: float) -> Callable[[], float]:
    return lambda: at


async def _config(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if request.method == "POST":
        body = await read_json(request)
        if not isinstance(body, dict) or set(body) - {"context_window", "clock", "provider_itself"}:
            return _bad('config accepts {"context_window": N, "clock": SECONDS or null, "provider_itself": BOOL}')
        itself = body.get("provider_itself", state.provider_itself)
        if not isinstance(itself, bool):
            return _bad("provider_itself must be true or false")
        window = body.get("context_window", state.context_window)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            return _bad("context_window must be a positive integer")
        clock = body.get("clock", state.fixed_clock)
        if clock is not None and (isinstance(clock, bool) or not isinstance(clock, (int, float)) or clock < 0):
            return _bad("clock must be unix seconds, or null for the real time")
        state.context_window = window
        state.provider_itself = itself
        if "clock" in body:  # a replay plays recorded calls at their own times: the cache's TTLs see those
            state.fixed_clock = None if clock is None else float(clock)
            state.clock = time.time if clock is None else _fixed(float(clock))
    shown: dict[str, Any] = {"context_window": state.context_window}
    if not state.provider_itself:  # shown when it differs from Anthropic's own API, as the clock when fixed
        shown["provider_itself"] = False
    if state.fixed_clock is not None:
        shown["clock"] = state.fixed_clock
    return web.json_response(shown)


def create_app(
    script: Iterable[dict[str, Any]] | None = None,
    *,
    context_window: int = 200_000,
    control_token: str | None = None,
    max_body: int = MAX_BODY,
) -> web.Application:
    """A fresh simulator app; its state is `app[STATE_KEY]`, its control token (random unless
    given) `app[STATE_KEY].control_token`. Serve it with `make_runner`."""
    app = web.Application(middlewares=[_intake], client_max_size=max_body)
    app[STATE_KEY] = SimulatorState(script, context_window=context_window, control_token=control_token)
    app[MAX_BODY_KEY] = max_body
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/messages", _messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", _count_tokens)
        app.router.add_post(f"{prefix}/chat/completions", _chat)
        app.router.add_post(f"{prefix}/responses", _responses)
        app.router.add_post(f"{prefix}/responses/compact", _compact)
        app.router.add_get(f"{prefix}/responses", responses_socket)  # the Responses WebSocket
        app.router.add_get(f"{prefix}/models", _models)
        app.router.add_get(f"{prefix}/models/{{model_id}}", _model)
    for prefix in ("/v1beta", "/v1", ""):
        app.router.add_post(f"{prefix}/models/{{target}}", _gemini)
    app.router.add_post("/_sim/script", _set_script)
    app.router.add_get("/_sim/script", _get_script)
    app.router.add_get("/_sim/requests", _requests)
    app.router.add_post("/_sim/reset", _reset)
    app.router.add_get("/_sim/config", _config)
    app.router.add_post("/_sim/config", _config)
    return app


def make_runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """A runner that leaves request bodies as sent: the app decodes them itself, within its limit."""
    return web.AppRunner(app, **{"access_log": None, **kwargs, "auto_decompress": False})


async def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    script: Iterable[dict[str, Any]] | None = None,
    *,
    context_window: int = 200_000,
    control_token: str | None = None,
    max_body: int = MAX_BODY,
) -> tuple[web.AppRunner, str]:
    """Serve a new simulator on host:port (0 = any free port); returns the runner and base URL."""
    app = create_app(script, context_window=context_window, control_token=control_token, max_body=max_body)
    runner = make_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{shown}:{bound_port}"
