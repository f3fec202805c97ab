"""Response headers and request checks for the UI and its API.

Everything the UI shows was captured from agents and is untrusted (prompts carry HTML and
scripts), so the page runs under a strict Content-Security-Policy: only our own scripts and
styles, no inline code, no framing, and Trusted Types with no policy at all, which makes any
``innerHTML``-style sink throw in the browser even if a bug tried to use one.

The API is read-only except deleting a session. That needs a random per-daemon token which only
the UI page carries (a cross-origin page cannot read it) and, when the browser sends one, a
same-origin ``Origin``. ``Host`` must name this machine (an IP literal, ``localhost`` or our own
hostname) so a DNS-rebinding page cannot read captured prompts through the read API.
"""

from __future__ import annotations

import hmac
import secrets

from aiohttp import web

from ctxscope.proxy.defence.hosts import host_allowed  # noqa: F401  (the UI's API and the proxy share one rule)
from ctxscope.vocab import headers

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}

TOKEN_HEADER = headers.TOKEN


def new_token() -> str:
    return secrets.token_hex(24)


def apply_headers(response: web.StreamResponse) -> web.StreamResponse:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def same_origin(request: web.Request) -> bool:
    """A browser's Origin / Sec-Fetch-Site, when sent, must say the request came from our page."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser (curl): the token alone decides
    return origin == f"{request.scheme}://{request.host}"


def token_ok(request: web.Request, token: str) -> bool:
    sent = request.headers.get(TOKEN_HEADER, "")
    return hmac.compare_digest(sent.encode(), token.encode())
