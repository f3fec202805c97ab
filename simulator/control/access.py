"""Who may use the control endpoints (/_sim/...): whoever scripts the simulator steers the agent
that talks to it, so a web page must not be able to, even one going through the daemon's proxy.

A request is taken only when all of these hold, like the UI's delete:
- ``Host`` names a loopback address (127.0.0.0/8, ::1, localhost): a DNS-rebound name is refused;
- a browser's ``Origin``, when sent, is the simulator's own origin, and ``Sec-Fetch-Site``, when
  sent, is ``same-origin`` or ``none``: a cross-origin page is refused even without reading;
- ``X-Sim-Token`` holds the simulator's token (a page cannot set that header on a no-cors
  request, nor learn the token): the check that holds behind a proxy that rewrites ``Host``;
- a POST says ``Content-Type: application/json`` (a form or ``text/plain`` needs no preflight).
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from aiohttp import web

TOKEN_HEADER = "X-Sim-Token"


def _host_port(value: str) -> tuple[str, int | None] | None:
    """(host, port) of a Host header, or None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else None
        if not bracket or (rest and port is None):
            return None
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            host, port = value, None
    if port is not None and not (port.isascii() and port.isdigit()):
        return None
    return host, int(port) if port else None


def is_loopback_host(value: str | None) -> bool:
    """True for a Host of 127.0.0.0/8, ::1 or localhost, with or without a port."""
    parsed = _host_port(value or "")
    if parsed is None or not parsed[0]:
        return False
    host = parsed[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def _same_origin(origin: str, host: str) -> bool:
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return False
    own = _host_port(host)
    if parts.scheme != "http" or own is None or parts.hostname is None:
        return False
    own_host = own[0].strip("[]")
    return parts.hostname == own_host and (port or 80) == (own[1] or 80)


def refusal(request: web.Request, token: str) -> web.Response | None:
    """None when the request may use the control plane, else the 403/415 answer saying why."""
    host = request.headers.get("Host")
    if not is_loopback_host(host):
        return _refuse(403, f"Host {host!r} is not a loopback address (127.0.0.1, ::1 or localhost)")
    origin = request.headers.get("Origin")
    if origin is not None and not _same_origin(origin, host or ""):
        return _refuse(403, f"cross-origin request from Origin {origin!r}")
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return _refuse(403, f"Sec-Fetch-Site {site!r}: only same-origin requests are taken")
    sent = request.headers.get(TOKEN_HEADER)
    if not sent:
        return _refuse(403, f"missing {TOKEN_HEADER} header (the token is in $CTXSCOPE_HOME/sim-token)")
    if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), token.encode()):
        return _refuse(403, f"wrong {TOKEN_HEADER}")
    if request.method == "POST" and request.content_type != "application/json":
        return _refuse(415, f"Content-Type must be application/json, not {request.content_type!r}")
    return None


def _refuse(status: int, why: str) -> web.Response:
    return web.json_response({"error": f"simulator control refused: {why}"}, status=status)
