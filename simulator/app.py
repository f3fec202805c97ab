"""The provider simulator's aiohttp application: provider routes plus /_sim control endpoints.

Provider routes (with and without the /v1 prefix, as real providers and SDK base URLs differ):
POST /v1/messages, /v1/messages/count_tokens (Anthropic), /v1/chat/completions, /v1/responses
(OpenAI), GET /v1/models[/{id}] (Anthropic's list shape when an `anthropic-version` header is
sent, OpenAI's otherwise). Replies come from the script queue (see `script.py` for the step
schema). Control: POST /_sim/script (a list replaces the queue, {"append": [...]} extends it;
GET shows it), GET /_sim/requests (every provider request received: method, path, headers with
secrets redacted, parsed body), POST /_sim/reset (queue, log, cache), GET/POST /_sim/config
({"context_window": N}).
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from aiohttp import web

from .anthropic_wire import AnthropicWire
from .exchange import handle_model_request, json_reply, key_fingerprint, read_json, redacted_headers
from .openai_chat_wire import ChatWire
from .openai_responses_wire import ResponsesWire
from .prompt import PromptError
from .script import ScriptError
from .state import STATE_KEY, SimulatorState

__all__ = ["STATE_KEY", "SimulatorState", "create_app", "start_simulator"]

ANTHROPIC, CHAT, RESPONSES = AnthropicWire(), ChatWire(), ResponsesWire()

OPENAI_MODELS = ("gpt-5", "gpt-5-mini", "gpt-4.1", "gpt-4o", "gpt-4o-mini", "gpt-sim")
ANTHROPIC_MODELS = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-sim")
_MODEL_CREATED = 1_735_689_600  # 2025-01-01, fixed so listings are deterministic


@web.middleware
async def _record(request: web.Request, handler: Any) -> web.StreamResponse:
    """Log every provider request (not /_sim) before it is answered."""
    if not request.path.startswith("/_sim"):
        body = await read_json(request)
        if body is None:
            raw = await request.read()
            body = raw.decode("utf-8", "replace") if raw else None
        request.app[STATE_KEY].log({
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": redacted_headers(request.headers),
            "key_fingerprint": key_fingerprint(request.headers),
            "body": body,
            "received_at": time.time(),
        })
    return await handler(request)


async def _messages(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, ANTHROPIC)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, CHAT)


async def _responses(request: web.Request) -> web.StreamResponse:
    return await handle_model_request(request, RESPONSES)


async def _count_tokens(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    body = await read_json(request)
    if not isinstance(body, dict):
        return json_reply(state, ANTHROPIC, 400, ANTHROPIC.error(400, None, "The request body is not a valid JSON object.", None))
    try:
        prompt, _ = ANTHROPIC.prompt(body, {})
    except PromptError as exc:
        return json_reply(state, ANTHROPIC, 400, ANTHROPIC.error(400, None, str(exc), None))
    return json_reply(state, ANTHROPIC, 200, ANTHROPIC.count_tokens(prompt))


def _anthropic_model(name: str) -> dict[str, Any]:
    return {"type": "model", "id": name, "display_name": name.replace("-", " ").title(), "created_at": "2025-01-01T00:00:00Z"}


def _openai_model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": _MODEL_CREATED, "owned_by": "ctxscope-sim"}


async def _models(request: web.Request) -> web.Response:
    if "anthropic-version" in request.headers:
        data = [_anthropic_model(m) for m in ANTHROPIC_MODELS]
        return web.json_response({"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]})
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


async def _config(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if request.method == "POST":
        body = await read_json(request)
        if not isinstance(body, dict) or set(body) - {"context_window"}:
            return _bad('config accepts {"context_window": N}')
        window = body.get("context_window", state.context_window)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            return _bad("context_window must be a positive integer")
        state.context_window = window
    return web.json_response({"context_window": state.context_window})


def create_app(script: Iterable[dict[str, Any]] | None = None, *, context_window: int = 200_000) -> web.Application:
    """A fresh simulator app; its state is `app[STATE_KEY]`."""
    app = web.Application(middlewares=[_record], client_max_size=64 * 1024 * 1024)
    app[STATE_KEY] = SimulatorState(script, context_window=context_window)
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/messages", _messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", _count_tokens)
        app.router.add_post(f"{prefix}/chat/completions", _chat)
        app.router.add_post(f"{prefix}/responses", _responses)
        app.router.add_get(f"{prefix}/models", _models)
        app.router.add_get(f"{prefix}/models/{{model_id}}", _model)
    app.router.add_post("/_sim/script", _set_script)
    app.router.add_get("/_sim/script", _get_script)
    app.router.add_get("/_sim/requests", _requests)
    app.router.add_post("/_sim/reset", _reset)
    app.router.add_get("/_sim/config", _config)
    app.router.add_post("/_sim/config", _config)
    return app


async def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    script: Iterable[dict[str, Any]] | None = None,
    *,
    context_window: int = 200_000,
) -> tuple[web.AppRunner, str]:
    """Serve a new simulator on host:port (0 = any free port); returns the runner and base URL."""
    runner = web.AppRunner(create_app(script, context_window=context_window), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{shown}:{bound_port}"
