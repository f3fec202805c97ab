"""Response headers and request checks for the UI and its API.

Everything the UI shows was captured from agents and is untrusted (prompts carry HTML and
scripts), so the page runs under a strict Content-Security-Policy: only our own scripts and
styles, no inline code, no framing, and Trusted Types with no policy at all, which makes any
``innerHTML``-style sink throw in the browser even if a bug tried to use one.

The API is read-only except deleting a session. That needs a random per-daemon token which only
the UI page carries (a cross-origin page cannot read it) and, when the browser sends one, a
same-origin ``Origin``. ``Host`` must name this machine (an IP literal, ``localhost`` or our own
hostname) so a DNS-rebinding page cannot read captured prompts through the read API.

In remote mode (``serve --allow-remote``) every UI route needs the daemon's remote key
(docs/architecture.md, "Remote mode needs a key"): in a header, or in an HttpOnly SameSite=Strict
cookie that opening ``/?key=KEY`` once sets. Without it a peer gets a 401, never the page (which
carries the write token).
"""

from __future__ import annotations

import hmac
import secrets

from aiohttp import web

from ctxscope.proxy.defence.hosts import cross_site
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
KEY_HEADER = headers.REMOTE_KEY
KEY_COOKIE = "ctxscope_key"
KEY_QUERY = "key"


def new_token() -> str:
    return secrets.token_hex(24)


def apply_headers(response: web.StreamResponse) -> web.StreamResponse:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def same_origin(request: web.Request) -> bool:
    """A browser's Origin / Sec-Fetch-Site, when sent, must say the request came from our page."""
    headers = request.headers  # (no Origin and no Sec-Fetch-Site: not a browser, the token alone decides)
    return not cross_site(headers.get("Origin"), headers.get("Sec-Fetch-Site"), request.scheme, request.host)


def token_ok(request: web.Request, token: str) -> bool:
    sent = request.headers.get(TOKEN_HEADER, "")
    return hmac.compare_digest(sent.encode(), token.encode())


def secret_matches(sent: str | None, secret: str) -> bool:
    return sent is not None and hmac.compare_digest(sent.encode("utf-8", "replace"), secret.encode())


def key_ok(request: web.Request, key: str) -> bool:
    """The remote key in X-Ctxscope-Key, ``Authorization: Bearer KEY`` or the login cookie."""
    auth = request.headers.get("Authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    sent = (request.headers.get(KEY_HEADER), bearer, request.cookies.get(KEY_COOKIE))
    return any(secret_matches(one, key) for one in sent)


def login_page(key: str) -> web.Response:
    """The answer to ``/?key=KEY``: the cookie, and a page that moves on to ``/`` without the key in
    its address (a meta refresh: our own page's navigation, so the Strict cookie goes with it)."""
    body = (
        '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/">'
        '<title>ctxscope</title><p>Signed in. <a href="/">Open ctxscope</a></p>'
    )
    response = web.Response(text=body, content_type="text/html")
    response.set_cookie(KEY_COOKIE, key, path="/", httponly=True, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"
    return response


def unauthorised(api: bool) -> web.Response:
    message = (
        "this ctxscope daemon is in remote mode: send its key (X-Ctxscope-Key or Authorization: Bearer), "
        "or open /?key=KEY once in the browser"
    )
    if api:
        response = web.json_response({"error": message}, status=401)
    else:
        response = web.Response(status=401, text=message + "\n")
    response.headers["WWW-Authenticate"] = 'Bearer realm="ctxscope"'
    response.headers["Cache-Control"] = "no-store"
    return response
