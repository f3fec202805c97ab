"""Is this user's ctxscope daemon the one answering at an address? The launcher and every command
that finds the daemon ask it the same way (docs/architecture.md, "The launcher proves its daemon")."""

from __future__ import annotations

import hmac
import http.client
import json
from urllib.parse import urlsplit

from .settings import DaemonConfig

STATUS_PATH = "/_ctxscope/api/status?store=0"
MAX_STATUS_BYTES = 64 * 1024  # a status is a few hundred bytes: a listener cannot make us read more


class NotCtxscope(RuntimeError):
    """Something that is not this user's ctxscope daemon answers on the port."""


def daemon_url(cfg: DaemonConfig) -> str:
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "", "localhost") else "[::1]" if cfg.host == "::" else cfg.host
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{cfg.port}"


def probe(url: str, secret: bytes, timeout: float = 2.0) -> bool:
    """True when this user's ctxscope daemon answers at ``url`` (it proved it knows the home's
    secret: ``ctxscope.proxy.defence.identity``), False when nothing listens; raises NotCtxscope for anything
    else. Plain ``http.client``: no proxy variables, no redirects followed."""
    from ctxscope.proxy.defence.identity import address, new_nonce, proof

    parts = urlsplit(url)
    own = address((parts.hostname or "", parts.port or 80))
    if own is None:
        raise NotCtxscope(f"{url} is not an IP address and port")
    nonce = new_nonce()
    conn = http.client.HTTPConnection(own[0], own[1], timeout=timeout)
    try:
        conn.request("GET", f"{STATUS_PATH}&nonce={nonce}")
        resp = conn.getresponse()
        body = resp.read(MAX_STATUS_BYTES)
        status = resp.status
    except ConnectionRefusedError:
        return False  # nothing listens: the caller may start a daemon there
    except (OSError, http.client.HTTPException) as exc:  # a reset, a timeout, not HTTP: something listens
        raise NotCtxscope(f"{url} answers, but not as ctxscope ({type(exc).__name__})") from None
    finally:
        conn.close()
    try:
        data = json.loads(body) if status == 200 else None
    except (ValueError, UnicodeDecodeError):
        data = None
    answer = data.get("identity") if isinstance(data, dict) else None
    if not isinstance(answer, str) or not hmac.compare_digest(answer, proof(secret, nonce, *own)):
        raise NotCtxscope(
            f"{url} answers (HTTP {status}), but does not prove it is your ctxscope daemon "
            f"(an HMAC with the secret in your ctxscope home)"
        )
    return True
