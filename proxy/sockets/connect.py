"""The forward proxy: ``CONNECT`` on the daemon's own port (docs/architecture.md, "The forward proxy").

A connection's first bytes decide what it is: ``CONNECT host:port`` is handled here, anything else
goes to aiohttp as before. A CONNECT to the host of a configured upstream on port 443 is answered
with TLS under a certificate of the local CA, and the HTTP inside is handed to the forwarder as if
it had come to that upstream's route (``/openai/...``, ``/u/NAME/...``): so it goes to the
upstream's configured URL and is recorded like base-URL traffic. Every other CONNECT is a blind
tunnel to its target, never recorded. Nothing goes anywhere else.

The protocol that reads the CONNECT head gives the connection away in the same call that finds the
head's end, with the bytes that came after it: nothing after the head is parsed as a second head or
lost (``tls.py`` says why ``loop.start_tls`` is not used). Every tunnel counts against
``max_connections`` like a direct connection; the HTTP inside an intercepted one runs under the
same guard (header, body and keep-alive timeouts) as direct connections.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ipaddress
import logging
import os
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, cast
from urllib.parse import quote

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from yarl import URL

from ctxscope.proxy.defence.connection import BUSY_RESPONSE, GuardedHandler, GuardedServer
from ctxscope.proxy.defence.limits import Limits
from ctxscope.proxy.sockets.intercepted import intercepted_hosts
from ctxscope.proxy.sockets.tls import TLSServer
from ctxscope.proxy.sockets.tunnel import BlindTunnel

if TYPE_CHECKING:
    from ctxscope.proxy.sockets.ca import LocalCA

log = logging.getLogger("ctxscope.proxy")

MAX_HEAD = 16 << 10
_REQUEST_LINE = re.compile(rb"CONNECT ([^\s]+) HTTP/1\.[01]\r\n", re.IGNORECASE)
_PROXY_AUTHORIZATION = re.compile(rb"\r\nproxy-authorization:[ \t]*([^\r\n]*)", re.IGNORECASE)
MAX_LABEL = 200  # characters of a session label taken from a CONNECT's Proxy-Authorization
_ESTABLISHED = b"HTTP/1.1 200 Connection Established\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CAFactory = Callable[[Collection[str]], "LocalCA"]


def split_target(target: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) of a CONNECT request; ValueError otherwise."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise ValueError(f"bad CONNECT target {target!r}")
    return host.strip("[]").lower().rstrip("."), int(port)


class BadLabel(ValueError):
    """A CONNECT's Proxy-Authorization is Basic but carries no usable session label."""


def connect_label(head: bytes) -> str | None:
    """The session label a CONNECT head carries as the user of ``Proxy-Authorization: Basic``
    (a proxy URL ``http://LABEL:ANY@host:port``; the password is ignored), None without one;
    BadLabel for a Basic value that is not base64 of UTF-8 text, or a label too long or with
    control characters (docs/architecture.md, "The forward proxy carries the launcher's label")."""
    found = _PROXY_AUTHORIZATION.findall(head)
    if not found:
        return None
    if len(found) > 1:
        raise BadLabel("more than one Proxy-Authorization header")
    scheme, _, token = found[0].strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None  # another scheme carries no label of ours
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise BadLabel("Proxy-Authorization: Basic is not base64 of UTF-8 text") from None
    label = text.partition(":")[0]
    if len(label) > MAX_LABEL:
        raise BadLabel(f"the session label in Proxy-Authorization is longer than {MAX_LABEL} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in label):
        raise BadLabel("the session label in Proxy-Authorization has control characters")
    return label.strip() or None


def label_segment(label: str) -> str:
    """``label`` as one path segment: percent-encoded, and a label of dots alone encoded too, so no
    URL parser takes it for ``.`` or ``..``."""
    text = quote(label, safe="")
    return text.replace(".", "%2E") if not text.strip(".") else text


def _loopback_peer(transport: asyncio.BaseTransport) -> bool:
    peer = transport.get_extra_info("peername")
    try:
        return bool(peer) and ipaddress.ip_address(peer[0]).is_loopback
    except (ValueError, TypeError, IndexError):
        return False


def _answer(transport: asyncio.BaseTransport, response: bytes) -> None:
    if not transport.is_closing():
        cast(asyncio.Transport, transport).write(response)  # a stream socket's
        transport.close()


class ConnectProxy:
    """Serves CONNECT requests; ``handler`` is the forwarder's (it gets the rewritten requests)."""

    def __init__(
        self, upstreams: dict[str, str], ca: CAFactory, handler: Handler, limits: Limits, connect_timeout: float = 30.0
    ):
        self.hosts = intercepted_hosts(upstreams)
        self._ca_factory = ca
        self._ca: LocalCA | None = None
        self._ca_stamp: tuple[int, int, int] | None = None
        self.handler, self.limits, self.connect_timeout = handler, limits, connect_timeout
        self.head_timeout = limits.header_timeout
        self._guard: GuardedServer | None = None  # the daemon's own connections (attach)
        self._inner: GuardedServer | None = None  # the HTTP inside intercepted tunnels
        # connections whose first bytes have not said what they are yet: counted as connections,
        # and closed at shutdown (neither aiohttp's nor a tunnel's)
        self.sniffed: set[asyncio.Transport] = set()
        self._open: dict[asyncio.BaseTransport, Callable[[], None]] = {}  # client socket -> how to abort it
        self._prefixes: dict[asyncio.BaseTransport, str] = {}  # intercepted TLS transport -> route prefix
        self._tasks: set[asyncio.Task] = set()

    # -- what the connection guard sees (proxy/defence/connection.py, Tunnels)

    def attach(self, guard: GuardedServer) -> None:
        """Called by the runner: tunnels count against ``guard``'s limit and report through it."""
        self._guard = guard
        self.limits, self.head_timeout = guard.limits, guard.limits.header_timeout
        base = web.Server(
            self._inside,
            access_log=None,
            auto_decompress=False,
            handler_cancellation=False,
            keepalive_timeout=self.limits.keepalive_timeout,
        )
        # The tunnel itself was counted when it opened: its HTTP is never refused for the count.
        self._inner = GuardedServer(base, replace(self.limits, max_connections=2**31 - 1))
        self._inner.counts, self._inner.log = guard.counts, guard.log

    @property
    def open_count(self) -> int:
        return len(self.sniffed) + len(self._open)

    def protocol(self, fallback: Callable[[], RequestHandler]) -> asyncio.Protocol:
        """The protocol of a new connection: sniffs for CONNECT, else becomes ``fallback()``'s."""
        return _FirstBytes(self, fallback)

    def _info(self, kind: str, message: str) -> None:
        if self._guard is not None:
            self._guard.log.info(kind, message)
        else:
            log.info("%s", message)

    @property
    def ca(self) -> LocalCA:
        """The local CA, loaded again when its certificate on disk changed (it was rotated)."""
        stamp = None
        if self._ca is not None:
            with contextlib.suppress(OSError):
                st = os.stat(self._ca.cert_path)
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._ca is None or stamp != self._ca_stamp:
            self._ca = self._ca_factory(tuple(self.hosts))
            with contextlib.suppress(OSError):
                st = os.stat(self._ca.cert_path)
                self._ca_stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        return self._ca

    async def _inside(self, request: web.BaseRequest) -> web.StreamResponse:
        """A request inside an intercepted tunnel, routed as if sent to the upstream's prefix."""
        prefix = self._prefixes.get(request.transport) if request.transport is not None else None
        if prefix is None:  # the tunnel closed under it
            return web.Response(status=502)
        raw = request.raw_path
        if not raw.startswith("/"):  # absolute-form or '*': not a request for this host's paths
            return web.Response(status=400, text="ctxscope: a request inside a tunnel must be for a path\n")
        try:
            cloned = request.clone(rel_url=URL(prefix + raw, encoded=True))
        except ValueError as exc:
            return web.Response(status=400, text=f"ctxscope: bad request target: {exc}\n"[:300])
        return await self.handler(cast(web.Request, cloned))  # the forwarder reads only what a BaseRequest has

    # -- a CONNECT head has arrived

    def accept(self, transport: asyncio.Transport, head: bytes, rest: bytes) -> None:
        """Decide now, before any more bytes are read: refuse, tunnel blind or intercept."""
        found = _REQUEST_LINE.match(head)
        try:
            host, port = split_target(found.group(1).decode("latin-1")) if found else ("", 0)
        except ValueError:
            found = None
        if not found or not host:
            self._info("connect_bad", "refused a malformed CONNECT request (400)")
            _answer(transport, _BAD_REQUEST)
            return
        try:
            label = connect_label(head)
        except BadLabel as exc:
            self._info("connect_bad", f"refused a CONNECT to {host}:{port}: {exc} (400)")
            _answer(transport, _BAD_REQUEST)
            return
        guard = self._guard
        if guard is not None and guard.load() >= self.limits.max_connections:
            guard.counts["refused"] += 1
            self._info(
                "refused",
                f"refused a CONNECT: {self.limits.max_connections} connections are open "
                "(the max_connections limit); answered 503",
            )
            _answer(transport, BUSY_RESPONSE)
            return
        prefix = self.hosts.get(host) if port == 443 else None
        if prefix is None and not _loopback_peer(transport):  # never an open proxy for other machines
            _answer(transport, _FORBIDDEN)
        elif prefix is None:
            self._tunnel(transport, host, port, rest)
        else:  # the label goes before the route, as the launcher's base URLs put it (/s/LABEL/openai/...)
            labelled = f"/s/{label_segment(label)}{prefix}" if label else prefix
            self._intercept(transport, host, labelled, rest)

    def _released(self, transport: asyncio.BaseTransport) -> Callable[[], None]:
        def release() -> None:
            self._open.pop(transport, None)

        return release

    def _tunnel(self, transport: asyncio.Transport, host: str, port: int, rest: bytes) -> None:
        """A blind tunnel to the CONNECT target: bytes both ways, nothing recorded."""
        released = self._released(transport)
        task: asyncio.Task | None = None

        def closed() -> None:  # a client that left while the connect is pending stops it
            released()
            if task is not None and not task.done():
                task.cancel()

        tunnel = BlindTunnel(transport, self.limits.tunnel_idle_timeout, closed)
        self._open[transport] = tunnel.abort
        tunnel.client.connection_made(transport)
        if rest:
            tunnel.client.data_received(rest)
        task = asyncio.ensure_future(self._reach(tunnel, host, port))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reach(self, tunnel: BlindTunnel, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            there, side = await asyncio.wait_for(
                loop.create_connection(tunnel.target_side, host, port), self.connect_timeout
            )
        except (OSError, TimeoutError, ValueError, UnicodeError) as exc:  # unreachable, or a name that is none
            self._info("connect_failed", f"CONNECT {host}:{port} failed: {' '.join(str(exc).split())[:200]} (502)")
            _answer(tunnel.client.transport, _BAD_GATEWAY)
            tunnel.close()
            return
        except asyncio.CancelledError:
            tunnel.abort()
            raise
        tunnel.connected(there, side, _ESTABLISHED)

    def _intercept(self, transport: asyncio.Transport, host: str, prefix: str, rest: bytes) -> None:
        """TLS as ``host`` under the local CA; the HTTP inside goes to the forwarder under ``prefix``."""
        inner_server = self._inner
        try:
            context = self.ca.server_context(host)
        except (OSError, ValueError) as exc:  # an unreadable or foreign CA on disk
            self._info("ca_failed", f"cannot intercept {host}: the local CA failed: {exc} (502)")
            _answer(transport, _BAD_GATEWAY)
            return
        if inner_server is None:
            raise RuntimeError("ConnectProxy.attach was not called")
        inner = GuardedHandler(inner_server, loop=asyncio.get_running_loop(), **inner_server._kwargs)
        released = self._released(transport)

        def lost() -> None:
            self._prefixes.pop(tls.inner, None)
            released()

        tls = TLSServer(
            context,
            inner,
            self.limits.header_timeout,
            lambda why: self._info("tls_failed", f"TLS for intercepted {host} failed: {why}"),
            lost,
        )
        self._open[transport] = transport.abort
        self._prefixes[tls.inner] = prefix
        transport.write(_ESTABLISHED)
        transport.set_protocol(tls)
        tls.connection_made(transport)
        if rest:  # a ClientHello sent in the same write as the CONNECT
            tls.data_received(rest)

    async def shutdown(self) -> None:
        """The daemon stops: the HTTP inside tunnels gets the same grace as direct calls to end whole
        (docs/architecture.md, "Honest outcomes"), then every socket goes."""
        if self._inner is not None:
            await self._inner.shutdown(self.limits.shutdown_grace)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for abort in list(self._open.values()):
            abort()
        self._open.clear()
        for transport in list(self.sniffed):  # accepted, but silent so far
            transport.close()
        self.sniffed.clear()


class _FirstBytes(asyncio.Protocol):
    """A connection until its first bytes say what it is (bounded in size and time)."""

    def __init__(self, proxy: ConnectProxy, fallback: Callable[[], RequestHandler]):
        self.proxy, self.fallback = proxy, fallback
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.timer: asyncio.TimerHandle | None = None
        self.decided = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream socket's
        self.proxy.sniffed.add(self.transport)
        self.timer = asyncio.get_running_loop().call_later(self.proxy.head_timeout, transport.close)

    def _decide(self) -> None:
        """This connection is no longer sniffed: it is the proxy's, aiohttp's, or gone."""
        if not self.decided:
            self.decided = True
            if self.transport is not None:
                self.proxy.sniffed.discard(self.transport)
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if self.decided or transport is None:
            return
        self.buffer += data
        head = self.buffer[:8].upper()
        if not b"CONNECT ".startswith(head) and not head.startswith(b"CONNECT "):
            self._decide()  # HTTP for aiohttp, as before
            protocol = self.fallback()
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            if not transport.is_closing():
                protocol.data_received(self.buffer)
            self.buffer = b""
            return
        if len(head) < 8:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self._decide()
                _answer(transport, _BAD_REQUEST)
            return
        self._decide()
        head_bytes, rest, self.buffer = self.buffer[: end + 4], self.buffer[end + 4 :], b""
        self.proxy.accept(transport, head_bytes, rest)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._decide()
