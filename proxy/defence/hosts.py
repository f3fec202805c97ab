"""Whether a Host header names this machine: the defence against DNS rebinding.

A page on another site can point its own name at 127.0.0.1 and then talk to the daemon as a
same-origin page would; its requests still carry that foreign name in Host. The UI's API, the
provider routes (unless remote mode is on) and the simulator's control endpoints accept only a
Host that is an IP literal, ``localhost`` (or ``*.localhost``) or this machine's own name.

A page on another site can also send a "simple" request (a POST of ``text/plain``) or open a
WebSocket to the daemon without any preflight; the browser then names that site in ``Origin``.
SDKs send no Origin. ``cross_site`` says when a browser's request came from a page that is not
the daemon's own (docs/architecture.md, "Provider routes refuse foreign pages").
"""

from __future__ import annotations

import ipaddress
import socket


def _local_names() -> frozenset[str]:
    names = {"localhost"}
    try:
        names.add(socket.gethostname().lower())
        names.add(socket.getfqdn().lower())
    except OSError:  # pragma: no cover - depends on the machine
        pass
    return frozenset(n for n in names if n)


_LOCAL_NAMES = _local_names()


def host_allowed(host_header: str | None) -> bool:
    """True when Host is an IP literal, localhost (or *.localhost) or this machine's name."""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):  # [v6]:port
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    host = host.rstrip(".")
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return host in _LOCAL_NAMES or host.endswith(".localhost")


def cross_site(origin: str | None, fetch_site: str | None, scheme: str, host: str | None) -> bool:
    """True when a browser says the request came from a page other than the daemon's own: an
    ``Origin`` that is not ``scheme://host`` (``null`` included), or ``Sec-Fetch-Site`` other than
    same-origin or none (typed in the address bar). No Origin and no Sec-Fetch-Site: not a browser."""
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    if origin is None:
        return False
    return not host or origin.lower() != f"{scheme}://{host}".lower()
