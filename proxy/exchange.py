"""The record of one HTTP exchange as the proxy saw it: the boundary between proxy and store.

The proxy fills it on the hot path with raw bytes only (no parsing, no hashing); everything
derived (decoded bodies, SSE events, usage, relations) is computed later by the store's writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(slots=True)
class Exchange:
    """One request/response pair, raw, with secrets already removed from the headers.

    Slotted, and read-only by convention (nothing assigns to one after it is made): a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, about 4 us per call on
    the hot path, where this one's positional ``__init__`` takes about 0.8 (the recorder passes the
    fields in order; docs/architecture.md, "The hot path parses nothing")."""

    id: str  # time-ordered unique id (see ids.py)
    provider: str  # route kind: "anthropic", "openai", "gemini" or "u/<name>"
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
    outcome: str  # an Outcome's value (plain text, as the spool and the store keep it)
    error: str | None = None  # human-readable detail for non-ok outcomes
    client: str | None = None  # user agent
    extra: dict[str, Any] = field(default_factory=dict)

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


@runtime_checkable
class ExpectingSink(Protocol):
    """A sink that wants word when a call begins, so it is ready to store the call when it ends (a
    writer whose process goes when idle starts it then). ``expect`` must never block or raise."""

    def expect(self) -> None: ...
