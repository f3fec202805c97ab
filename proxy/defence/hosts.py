"""Whether a Host header names this machine: the defence against DNS rebinding.

A page on another site can point its own name at 127.0.0.1 and then talk to the daemon as a
same-origin page would; its requests still carry that foreign name in Host. The UI's API and the
simulator's control endpoints (reached through the proxy) accept only a Host that is an IP
literal, ``localhost`` (or ``*.localhost``) or this machine's own name.
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
