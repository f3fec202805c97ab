"""The forward proxy: ``CONNECT`` on the daemon's own port (docs/architecture.md, "The forward proxy").

A connection's first bytes decide what it is: ``CONNECT host:port`` is handled here, anything else
goes to aiohttp as before. A CONNECT to the host of a configured upstream on port 443 is answered
with TLS under a certificate of the local CA, and the HTTP inside is handed to the forwarder as if
it had come to that upstream's route (``/openai/...``, ``/u/NAME/...``): so it goes to the
upstream's configured URL and is recorded like base-URL traffic. Every other CONNECT is a blind
tunnel to its target, never recorded. Nothing goes anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from yarl import URL

if TYPE_CHECKING:
    from ctxscope.proxy.sockets.ca import LocalCA

log = logging.getLogger("ctxscope.proxy")

PROVIDER_HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com",
                  "gemini": "generativelanguage.googleapis.com"}  # fmt: skip
MAX_HEAD = 16 << 10
_REQUEST_LINE = re.compile(rb"CONNECT ([^\s]+) HTTP/1\.[01]\r\n", re.IGNORECASE)
_ESTABLISHED = b"HTTP/1.1 200 Connection Established\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def intercepted_hosts(upstreams: dict[str, str]) -> dict[str, str]:
    """Host -> the route prefix its traffic takes: the provider hosts of the built-in names, and the
    hosts of the other upstreams' https URLs."""
    hosts: dict[str, str] = {}
    for name, url in upstreams.items():
        prefix = f"/{name}" if name in PROVIDER_HOSTS else f"/u/{quote(name, safe='')}"
        if name in PROVIDER_HOSTS:
            hosts[PROVIDER_HOSTS[name]] = prefix
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            hosts.setdefault(parts.hostname.lower(), prefix)
    return hosts


def split_target(target: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) of a CONNECT request; ValueError otherwise."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise ValueError(f"bad CONNECT target {target!r}")
    return host.strip("[]").lower(), int(port)


def _loopback_peer(transport: asyncio.BaseTransport) -> bool:
    peer = transport.get_extra_info("peername")
    try:
        return bool(peer) and ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return False


class ConnectProxy:
    """Serves CONNECT requests; ``handler`` is the forwarder's (it gets the rewritten requests)."""

    def __init__(self, upstreams: dict[str, str], ca: Callable[[], LocalCA], handler: Handler,
                 connect_timeout: float = 30.0, head_timeout: float = 15.0):
        self.hosts = intercepted_hosts(upstreams)
        self._ca_factory: Callable[[], LocalCA] = ca
        self._ca: LocalCA | None = None
        self.handler, self.connect_timeout, self.head_timeout = handler, connect_timeout, head_timeout
        self._server = web.Server(self._inside, access_log=None, auto_decompress=False)
        self._tasks: set[asyncio.Task] = set()
        self._transports: set[asyncio.BaseTransport] = set()
        self._prefixes: dict[asyncio.BaseTransport, str] = {}  # intercepted TLS transport -> route prefix

    @property
    def ca(self) -> LocalCA:
        if self._ca is None:
            self._ca = self._ca_factory()
        return self._ca

    async def _inside(self, request: web.BaseRequest) -> web.StreamResponse:
        """A request inside an intercepted tunnel, routed as if sent to the upstream's prefix."""
        prefix = self._prefixes.get(request.transport) if request.transport is not None else None
        if prefix is None:  # the tunnel closed under it
            return web.Response(status=502)
        cloned = request.clone(rel_url=URL(prefix + request.raw_path, encoded=True))
        return await self.handler(cloned)  # type: ignore[arg-type]

    def protocol(self, fallback: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        """The protocol of a new connection: sniffs for CONNECT, else becomes ``fallback()``'s."""
        return _FirstBytes(self, fallback)

    def start(self, transport: asyncio.Transport, head: bytes, rest: bytes) -> None:
        task = asyncio.ensure_future(self._serve(transport, head, rest))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        for transport in list(self._transports):
            transport.close()
        await self._server.shutdown(1.0)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, transport: asyncio.Transport, head: bytes, rest: bytes) -> None:
        self._transports.add(transport)
        try:
            found = _REQUEST_LINE.match(head)
            try:
                host, port = split_target(found.group(1).decode("latin-1")) if found else ("", 0)
            except ValueError:
                found = None
            if not found:
                transport.write(_BAD_REQUEST)
                transport.close()
                return
            prefix = self.hosts.get(host) if port == 443 else None
            if prefix is None and not _loopback_peer(transport):  # never an open proxy for other machines
                transport.write(_FORBIDDEN)
                transport.close()
            elif prefix is None:
                await self._tunnel(transport, host, port, rest)
            else:
                await self._intercept(transport, host, prefix)
        finally:
            self._transports.discard(transport)

    async def _tunnel(self, transport: asyncio.Transport, host: str, port: int, rest: bytes) -> None:
        """A blind tunnel to the CONNECT target: bytes both ways, nothing recorded."""
        loop = asyncio.get_running_loop()
        here = _Pipe()
        transport.set_protocol(here)
        here.connection_made(transport)
        try:
            there_transport, there = await asyncio.wait_for(
                loop.create_connection(_Pipe, host, port), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            log.info("CONNECT %s:%s failed: %s", host, port, exc)
            transport.write(_BAD_GATEWAY)
            transport.close()
            return
        here.peer, there.peer = there_transport, transport
        transport.write(_ESTABLISHED)
        if rest:
            there_transport.write(rest)
        here.flush_to(there_transport)
        await asyncio.wait([asyncio.ensure_future(here.closed), asyncio.ensure_future(there.closed)],
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        transport.close()
        there_transport.close()

    async def _intercept(self, transport: asyncio.Transport, host: str, prefix: str) -> None:
        """TLS as ``host`` under the local CA; the HTTP inside goes to the forwarder under ``prefix``."""
        loop = asyncio.get_running_loop()
        inner = _TunnelHandler(self._server, loop=loop, **self._server._kwargs)
        transport.write(_ESTABLISHED)
        try:
            tls = await asyncio.wait_for(
                loop.start_tls(transport, inner, self.ca.server_context(host), server_side=True), self.head_timeout)
        except (OSError, TimeoutError, ConnectionError) as exc:  # the client did not trust us, or left
            log.info("TLS for intercepted %s failed: %s", host, exc)
            transport.close()
            return
        if tls is None:
            return
        self._transports.add(tls)
        self._prefixes[tls] = prefix
        try:
            inner.connection_made(tls)
            await inner.ended
        finally:
            self._transports.discard(tls)
            self._prefixes.pop(tls, None)


class _TunnelHandler(RequestHandler):
    """aiohttp's protocol for the HTTP inside one intercepted tunnel; ``ended`` when it closes."""

    __slots__ = ("ended",)

    def __init__(self, manager: web.Server, **kwargs):
        super().__init__(manager, **kwargs)
        self.ended: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        if not self.ended.done():
            self.ended.set_result(None)


class _FirstBytes(asyncio.Protocol):
    """A connection until its first bytes say what it is (bounded in size and time)."""

    def __init__(self, proxy: ConnectProxy, fallback: Callable[[], asyncio.Protocol]):
        self.proxy, self.fallback = proxy, fallback
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.timer = asyncio.get_running_loop().call_later(self.proxy.head_timeout, transport.close)

    def _hand_over(self, protocol: asyncio.Protocol, data: bytes) -> None:
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        if data:
            protocol.data_received(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head = self.buffer[:8].upper()
        if not b"CONNECT ".startswith(head) and not head.startswith(b"CONNECT "):
            self._hand_over(self.fallback(), self.buffer)  # HTTP for aiohttp, as before
            return
        if len(head) < 8:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                assert self.transport is not None
                self.transport.write(_BAD_REQUEST)
                self.transport.close()
            return
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.proxy.start(self.transport, self.buffer[: end + 4], self.buffer[end + 4 :])

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


class _Pipe(asyncio.Protocol):
    """One side of a blind tunnel: what arrives is written to the peer, with back-pressure."""

    def __init__(self) -> None:
        self.peer: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def flush_to(self, peer: asyncio.Transport) -> None:
        for chunk in self.pending:
            peer.write(chunk)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)
        else:
            self.peer.write(data)

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.can_write_eof():
            self.peer.write_eof()
            return True
        return False

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self.peer is not None:
            self.peer.close()
