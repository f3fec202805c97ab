"""The record of one HTTP exchange as the proxy saw it: the boundary between proxy and store.

The proxy fills it on the hot path with raw bytes only (no parsing, no hashing); everything
derived (decoded bodies, SSE events, usage, relations) is computed later by the store's writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# Outcomes of an exchange.
OK = "ok"
HTTP_ERROR = "http_error"  # the upstream answered with a status >= 400
UPSTREAM_UNREACHABLE = "upstream_unreachable"  # no connection to the upstream could be made (in time)
UPSTREAM_RESET = "upstream_reset"  # the upstream's connection broke after it was made (or it answered non-HTTP)
CLIENT_DISCONNECTED = "client_disconnected"  # the client left (or stalled its body) before the end
TIMEOUT = "timeout"  # the upstream was silent longer than the read timeout
INTERRUPTED = "interrupted"  # cut by the daemon's own shutdown
REQUEST_TOO_LARGE = "request_too_large"  # a body over the limit, answered 413, never forwarded
OUTCOMES = (OK, HTTP_ERROR, UPSTREAM_UNREACHABLE, UPSTREAM_RESET, CLIENT_DISCONNECTED, TIMEOUT, INTERRUPTED,
            REQUEST_TOO_LARGE)


@dataclass(frozen=True)
class Exchange:
    """One request/response pair, raw, with secrets already removed from the headers."""

    id: str  # time-ordered unique id (see proxy.ids)
    provider: str  # route kind: "anthropic", "openai" or "u/<name>"
    upstream: str  # base URL the request was forwarded to
    method: str
    path: str  # path below the provider prefix, e.g. "/v1/messages"
    query: str  # raw query string without "?"
    session_label: str | None  # from /s/<label>/ or x-ctxscope-session
    annotations: tuple[tuple[str, str], ...]  # stripped x-ctxscope-* headers (name lowercased, value)
    request_headers: tuple[tuple[str, str], ...]  # as received, secrets replaced by "[redacted]"
    key_fingerprint: str | None  # salted hash of the API key, to tell keys apart
    request_body: bytes  # exactly the bytes forwarded upstream (possibly compressed)
    status: int | None  # upstream status, None when no response arrived
    response_headers: tuple[tuple[str, str], ...]
    response_body: bytes  # exactly the bytes the client was sent (possibly compressed)
    started_at: float  # unix seconds when the request arrived
    first_byte_at: float | None  # unix seconds of the first response body byte
    ended_at: float
    outcome: str  # one of OUTCOMES
    error: str | None = None  # human-readable detail for non-ok outcomes
    client: str | None = None  # user agent
    extra: dict = field(default_factory=dict)

    def header(self, name: str, *, response: bool = False) -> str | None:
        """First header value by case-insensitive name."""
        name = name.lower()
        for k, v in self.response_headers if response else self.request_headers:
            if k.lower() == name:
                return v
        return None


class ExchangeSink(Protocol):
    """Where the proxy hands finished exchanges. ``submit`` must never block or raise."""

    def submit(self, exchange: Exchange) -> None: ...
