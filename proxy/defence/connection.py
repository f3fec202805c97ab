"""The daemon's client connections: how long a client may take, how many it may hold, and who left.

aiohttp closes idle keep-alive connections, but it has no deadline for a request head or body that
arrives slowly: a client sending one byte a second held a connection (and its handler) for hours.
So each connection runs under a guard, a subclass of aiohttp's protocol that

- closes a connection whose request head is not complete ``header_timeout`` after its opening or,
  between requests, after its first byte;
- closes a connection whose request body brings less than ``BODY_PROGRESS`` bytes in a
  ``body_timeout`` window (a reader that stopped reading is not the client's fault: that counts as
  progress), and fails the body's reader with :class:`RequestBodyStalled`; a body the parser gives
  up on midway (bad chunking) fails its reader with the parser's error;
- answers a connection over ``max_connections`` with a 503 in both providers' error shape, then
  closes it, without ever reading its request;
- tells the request handler when its client leaves (``watch``), so the forwarder can stop the
  upstream request at once instead of paying for an answer nobody reads;
- logs a client's mistakes (malformed requests, disconnects) as one line, not a traceback.

Idle keep-alive connections are aiohttp's own business (``keepalive_timeout``, passed by the runner).
The per-chunk cost is one extra method call: the clocks are timers armed per request, not per read.
This leans on a few of aiohttp's protocol internals (its message queue and request count); the
tests in test_proxy_limits.py attack each guard, so an aiohttp that changes them fails loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from aiohttp import StreamReader, web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_server import Server

from ctxscope.proxy.defence.limits import BODY_PROGRESS, Limits

# aiohttp reports a request it could not handle on "aiohttp.server", with a traceback; the guard's
# handler reports those, and what the guards did, here in one line each.
log = logging.getLogger("ctxscope.proxy")

# A client's own mistakes, reported in one line: a malformed request (aiohttp answers it 400 itself),
# a body that broke off, a connection that went away.
EXPECTED_CLIENT_ERRORS = (HttpProcessingError, RequestPayloadError, ConnectionError, asyncio.IncompleteReadError)

_BUSY_MESSAGE = "ctxscope: too many connections at once; retry shortly"
# Readable by either provider's SDK: Anthropic's reads error.type, OpenAI's error.message and code.
_BUSY_BODY = json.dumps(
    {
        "type": "error",
        "error": {"type": "overloaded_error", "message": _BUSY_MESSAGE, "param": None, "code": "too_many_connections"},
    }
).encode()
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Security-Policy: sandbox\r\n"
    b"X-Content-Type-Options: nosniff\r\n\r\n" + _BUSY_BODY
)
_REFUSED_LINGER = 1.0  # seconds a refused client has to read the 503 before the socket is dropped


class RequestBodyStalled(ConnectionResetError):
    """The client stopped sending its request body; the connection has been closed."""


class _OncePerSecond:
    """One log line per kind of event per second, with a count of the ones left out: a flood of
    bad requests must not become a flood of log lines."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def info(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -2.0) < 1.0:
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            return
        quiet = self._quiet.pop(kind, 0)
        self._last[kind] = now
        log.info("%s%s", message, f" (and {quiet} more like it in the last second)" if quiet else "")


class Tunnels(Protocol):
    """The forward proxy as the guard sees it (proxy/sockets/connect.py): it decides on a
    connection's first bytes whether it is a CONNECT or aiohttp's, and its open tunnels (and the
    connections still being sniffed) count against ``max_connections`` with aiohttp's own."""

    def protocol(self, fallback: Callable[[], RequestHandler]) -> asyncio.Protocol: ...

    def attach(self, guard: GuardedServer) -> None: ...

    @property
    def open_count(self) -> int: ...


class GuardedServer(Server):
    """aiohttp's Server, making guarded connections; ``counts`` says what the guards did."""

    def __init__(self, base: Server, limits: Limits):
        super().__init__(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
        self.limits = limits
        self.counts = {"header_timeouts": 0, "idle_closed": 0, "body_stalls": 0, "refused": 0, "client_errors": 0}
        self.log = _OncePerSecond()
        self.tunnels: Tunnels | None = None  # set by the runner when the port also serves CONNECT

    def __call__(self) -> RequestHandler:
        if self.tunnels is not None:
            return self.tunnels.protocol(self._guarded)  # type: ignore[return-value]  # aiohttp types the factory's product
        return GuardedHandler(self, loop=self._loop, **self._kwargs)

    def load(self) -> int:
        """Connections that count against ``max_connections``: aiohttp's and the forward proxy's."""
        tunnels = self.tunnels
        return len(self._connections) + (tunnels.open_count if tunnels is not None else 0)

    def _guarded(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, **self._kwargs)

    @property
    def open_connections(self) -> int:
        return len(self._connections)


class GuardedHandler(RequestHandler):
    """One client connection (see the module docstring)."""

    __slots__ = (
        "_body",
        "_body_mark",
        "_body_since",
        "_body_timer",
        "_guard",
        "_head_started",
        "_head_timer",
        "_refused",
        "_watch",
        "close_reason",
    )

    def __init__(self, manager: GuardedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = manager
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_started = False  # some bytes of a head arrived (a connection that sent none is just idle)
        self._body: StreamReader | None = None  # the payload of the request whose body is arriving
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_mark = 0  # body bytes received when the current window began
        self._body_since = 0.0  # when it began
        self._watch: Callable[[], None] | None = None
        self._refused = False
        self.close_reason: str | None = None  # why the guard closed the connection, for the capture

    def watch(self, on_client_left: Callable[[], None] | None) -> None:
        """Call ``on_client_left`` if the client closes the connection (not when the daemon does)."""
        self._watch = on_client_left

    # -- opening and closing

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if guard.load() >= guard.limits.max_connections:
            self._refuse(cast(asyncio.Transport, transport))  # (a stream's: aiohttp casts it so too)
            return
        super().connection_made(transport)
        self._head_timer = self._loop.call_later(guard.limits.header_timeout, self._head_expired)

    def _refuse(self, transport: asyncio.Transport) -> None:
        self._refused = self._force_close = True  # aiohttp's parser ignores whatever arrives
        guard = self._guard
        guard.counts["refused"] += 1
        guard.log.info(
            "refused",
            f"refused a connection: {guard.limits.max_connections} connections are open "
            "(the max_connections limit); answered 503",
        )
        transport.write(BUSY_RESPONSE)
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
            transport.write_eof()
        self._loop.call_later(_REFUSED_LINGER, transport.abort)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        # The daemon closes a connection through force_close, which lets go of the transport first;
        # a transport still held here was closed by the client (also while the daemon is stopping).
        by_client = self.transport is not None
        body = self._body
        if body is not None and not body.is_eof():  # a handler not started yet must not wait for ever
            if self.close_reason is None:
                self.close_reason = f"client closed the connection mid-request ({body.total_bytes} body bytes received)"
            body.set_exception(ConnectionResetError(self.close_reason))
        watch, self._watch = self._watch, None
        super().connection_lost(exc)
        if watch is not None and by_client:
            watch()

    # -- reading

    def data_received(self, data: bytes) -> None:
        body = self._body
        reading_body = body is not None and not body.is_eof()
        count = self._request_count
        RequestHandler.data_received(self, data)
        if self._request_count == count:  # no new request
            if reading_body:  # body bytes: the body clock watches them
                return
            self._body = None  # part of a head (or nothing): its clock runs from the first byte
            if data and not self._force_close:
                self._head_started = True
                if self._head_timer is None:
                    self._head_timer = self._loop.call_later(self._guard.limits.header_timeout, self._head_expired)
            return
        if reading_body and body is not None and not body.is_eof():
            self._body_malformed(body)
            return
        # A head is complete (the same bytes may have ended the previous body): the last request's
        # body, if it is still arriving, is the one the body clock watches.
        timer = self._head_timer
        if timer is not None:
            timer.cancel()
            self._head_timer = None
        self._body = None
        messages = self._messages
        if messages:
            payload = messages[-1][1]
            if not payload.is_eof():
                self._body = payload
                self._body_mark = payload.total_bytes
                self._body_since = self._loop.time()
                if self._body_timer is None:  # (one left by an earlier body finds this window not over yet)
                    self._body_timer = self._loop.call_later(self._guard.limits.body_timeout, self._body_check)

    def _body_malformed(self, body: StreamReader) -> None:
        """The parser gave up on a body being read (bad chunking...) and queued its error as the next
        request: fail the body's reader with it, or the handler would wait for bytes that never come."""
        self._body = None
        message = self._messages[-1][0] if self._messages else None
        exc = getattr(message, "exc", None)
        body.set_exception(exc if isinstance(exc, BaseException) else BadHttpMessage("malformed request body"))
        body.feed_eof()  # nothing more will come: aiohttp must not try to drain it after the answer

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport is None or self._force_close or getattr(self, "_request_in_progress", False):
            return  # (a request in progress: the next byte of the following head restarts the clock)
        guard = self._guard
        self.close_reason = f"no complete request head within {guard.limits.header_timeout:g}s"
        if self._head_started:
            guard.counts["header_timeouts"] += 1
            guard.log.info(
                "header_timeout",
                f"closed a connection from {self._peer()}: {self.close_reason} (the header_timeout limit)",
            )
        else:  # opened and never used (a browser's spare connection): not worth a line
            guard.counts["idle_closed"] += 1
        self.force_close()

    def _body_check(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof() or self.transport is None:
            return
        guard = self._guard
        timeout = guard.limits.body_timeout
        now = self._loop.time()
        if now - self._body_since < timeout - 0.01:  # armed for an earlier body: wait out this one's window
            self._body_timer = self._loop.call_later(self._body_since + timeout - now, self._body_check)
            return
        got = body.total_bytes
        if got - self._body_mark >= BODY_PROGRESS or self._reading_paused or self._buffer_paused:
            self._body_mark, self._body_since = got, now
            self._body_timer = self._loop.call_later(timeout, self._body_check)
            return
        guard.counts["body_stalls"] += 1
        self.close_reason = (
            f"request body stalled: {got - self._body_mark} bytes in {guard.limits.body_timeout:g}s "
            f"({got} received in all; the body_timeout limit wants {BODY_PROGRESS} per window)"
        )
        guard.log.info("body_stall", f"closed a connection from {self._peer()}: {self.close_reason}")
        self._body = None
        body.set_exception(RequestBodyStalled(self.close_reason))
        self.force_close()

    def _peer(self) -> str:
        peer = self.peername
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    # -- logging

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, EXPECTED_CLIENT_ERRORS):
            self._guard.counts["client_errors"] += 1
            text = " ".join(str(exc).split())[:300]  # (aiohttp's own words, "Unhandled exception", say nothing)
            self._guard.log.info(type(exc).__name__, f"a request from {self._peer()} ended early: {text}")
            return
        super().log_exception(*args, **kw)


class ProxyRunner(web.AppRunner):
    """An AppRunner whose connections are guarded by ``limits``."""

    def __init__(self, app: web.Application, limits: Limits, tunnels: Tunnels | None = None, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limits = limits
        self._tunnels = tunnels

    async def _make_server(self) -> Server:
        server = GuardedServer(await super()._make_server(), self._limits)
        if self._tunnels is not None:
            server.tunnels = self._tunnels
            self._tunnels.attach(server)
        return server
