"""What the proxy answers itself (upstream down, body too large, a refused path...): errors in the
provider's own JSON shape, so SDKs raise their usual exception, served sandboxed like every answer."""

from __future__ import annotations

import json

from aiohttp import web

from ctxscope.proxy.forward.headers import SANDBOX
from ctxscope.proxy.forward.routing import ANTHROPIC_SHAPE, Route, Upstream

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    403: "permission_error",
    413: "request_too_large",
    504: "timeout_error",
}
_OPENAI_CODES = {413: "request_too_large", 502: "upstream_unreachable", 504: "upstream_timeout"}


def error_body(route: Route, status: int, message: str, code: str | None = None) -> bytes:
    """Anthropic's error JSON on Anthropic routes, OpenAI's elsewhere; ``code`` is OpenAI's ``code``."""
    text = f"ctxscope: {message}"
    if route.error_shape == ANTHROPIC_SHAPE:
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": text}}).encode()
    code = code or _OPENAI_CODES.get(status, "proxy_error")
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": text, "type": kind, "param": None, "code": code}}).encode()


def refusal(route: Route, status: int, message: str, code: str) -> web.Response:
    """A request the proxy answers itself without forwarding or recording it."""
    return web.Response(
        status=status, body=error_body(route, status, message, code), content_type="application/json", headers=SANDBOX
    )


def gone() -> web.Response:
    """What a handler returns when its client has left: aiohttp finds nobody to send it to."""
    return web.Response(status=499)


# Provider paths a client sends when its base URL lacks ctxscope's route prefix (a common mistake).
UNPREFIXED = ("/v1/{tail:.*}", "/chat/{tail:.*}", "/messages", "/responses")


async def unprefixed(request: web.Request) -> web.Response:
    """A provider path with no route prefix: a 404 in the provider's JSON shape that names the
    prefixes, so the client's SDK raises its usual error with the fix in its message."""
    path = request.path
    route = Route("openai", Upstream("openai", ""), path, None)
    anthropic = route.error_shape == ANTHROPIC_SHAPE
    example = "/anthropic" + path if anthropic else "/openai" + (path if path.startswith("/v1/") else "/v1" + path)
    message = (
        f"no route for {path}: ctxscope routes need a provider prefix in the base URL, e.g. {example} "
        "(or /u/NAME/... for an upstream you added, /u/sim/... for the simulator)"
    )
    return web.Response(
        status=404,
        body=error_body(route, 404, message, "no_route_prefix"),
        content_type="application/json",
        headers=SANDBOX,
    )
