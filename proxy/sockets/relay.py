"""Relaying a WebSocket upgrade on a provider route to the same path upstream (docs/architecture.md,
"Responses over WebSocket").

The upstream socket is opened first; only when it is accepted is the client's upgraded, so an
upstream that refuses answers the client itself: its status, headers and body, as for any call.
Then every message passes on as it came, text as text, binary as binary, pings and closes
included, one at a time in each direction and in order (with ``--ask-diagnosis`` a
``response.create`` may go upstream with the diagnosis asked for, ``forward/ask_diagnosis.py``).
The calls in it are recorded by ``SocketCalls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

import aiohttp
from aiohttp import WSMsgType, web
from aiohttp.connector import Connection
from yarl import URL

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.forward.answers import error_body
from ctxscope.proxy.forward.ask_diagnosis import DiagnosisAsker
from ctxscope.proxy.forward.headers import SANDBOX, client_response_headers
from ctxscope.proxy.forward.routing import Route
from ctxscope.proxy.sockets.calls import SocketCalls
from ctxscope.vocab.kinds import Outcome

log = logging.getLogger("ctxscope.proxy")

# The handshake headers aiohttp makes for each side itself; the client's go no further.
_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
CLOSE_TIMEOUT = 10.0
# The body of a refused upgrade, read before aiohttp closes the response (see _HandshakeResponse).
_Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse  # either end of a relayed socket
_REFUSED: ContextVar[list[bytes] | None] = ContextVar("ctxscope_ws_refused", default=None)


class _HandshakeResponse(aiohttp.ClientResponse):
    """aiohttp drops the body of a response that refuses an upgrade; this one keeps it first."""

    async def start(self, connection: Connection) -> aiohttp.ClientResponse:
        started = await super().start(connection)
        holder = _REFUSED.get()
        if holder is not None and self.status != 101:
            holder.append(await self.read())
        return started


def is_upgrade(request: web.Request) -> bool:
    return request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket"


class WebSocketRelay:
    """Opens upstream sockets with a client of its own and relays them; ``submit`` hands a
    finished Exchange to the capture and must not raise."""

    def __init__(
        self,
        connect_timeout: float,
        max_message: int,
        salt: bytes,
        submit: Callable[[ex.Exchange], None],
        asker: DiagnosisAsker | None = None,
    ):
        self.connect_timeout, self.max_message, self.salt = connect_timeout, max_message, salt
        self._submit = submit
        self.asker = asker  # `serve --ask-diagnosis`: each response.create frame is asked for upstream
        self._session: aiohttp.ClientSession | None = None
        self._open: set[web.WebSocketResponse] = set()
        self._stopping = False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                response_class=_HandshakeResponse,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            )
        return self._session

    async def shutdown(self) -> None:
        """The daemon stops: open sockets are closed (going away), their unanswered calls recorded."""
        self._stopping = True
        for ws in list(self._open):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"ctxscope stopping"), CLOSE_TIMEOUT
                )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def submit(self, exchange: ex.Exchange) -> None:
        try:
            self._submit(exchange)
        except Exception:  # traffic never depends on the capture
            log.exception("capture sink failed; the socket's call was relayed but not recorded")

    async def relay(
        self,
        request: web.Request,
        route: Route,
        query: str,
        headers: list[tuple[str, str]],
        annotations: list[tuple[str, str]],
        label: str | None,
    ) -> web.StreamResponse:
        started = time.time()
        calls = SocketCalls(route, headers, annotations, label, query, self.salt, self.submit, self.asker)
        forward = [(k, v) for k, v in headers if k.lower() not in _HANDSHAKE]
        protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        url = route.target_url + ("?" + query if query else "")
        holder: list[bytes] = []
        token = _REFUSED.set(holder)
        try:
            upstream = await self._client().ws_connect(
                URL(url, encoded=True) if url.isascii() else url,
                headers=forward,
                protocols=protocols,
                autoclose=False,
                autoping=False,
                max_msg_size=self.max_message,
                compress=0,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT),
            )
        except aiohttp.WSServerHandshakeError as exc:
            body = holder[0] if holder else b""
            received = tuple((exc.headers or {}).items())
            calls.response_headers = received
            outcome = Outcome.HTTP_ERROR if exc.status >= 400 else Outcome.OK
            calls.refused(started, exc.status, outcome, f"upstream refused the WebSocket upgrade: {exc.message}", body)
            return web.Response(status=exc.status, body=body, headers=client_response_headers(received))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            message = f"upstream unreachable for the WebSocket upgrade: {exc}"
            calls.refused(started, None, Outcome.UPSTREAM_UNREACHABLE, message, b"")
            return web.Response(
                status=502, body=error_body(route, 502, message), content_type="application/json", headers=SANDBOX
            )
        finally:
            _REFUSED.reset(token)
        calls.response_headers = tuple(upstream._response.headers.items())
        client = web.WebSocketResponse(
            protocols=[upstream.protocol] if upstream.protocol else (),
            autoclose=False,
            autoping=False,
            max_msg_size=self.max_message,
            compress=False,
        )
        try:
            await client.prepare(request)
        except (ConnectionError, RuntimeError) as exc:
            await upstream.close()
            calls.closed(Outcome.CLIENT_DISCONNECTED, f"the client left during the upgrade: {exc}")
            return client
        self._open.add(client)
        try:
            await self._pump_both(client, upstream, calls)
        finally:
            self._open.discard(client)
        return client

    async def _pump_both(
        self, client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse, calls: SocketCalls
    ) -> None:
        ended: list[str] = []  # which side closed or broke first
        to_upstream = asyncio.ensure_future(_pump(client, upstream, calls.client_frame, ended, "client"))
        to_client = asyncio.ensure_future(_pump(upstream, client, calls.upstream_frame, ended, "upstream"))
        outcome, why = Outcome.INTERRUPTED, "cut by the daemon's shutdown"
        try:
            await asyncio.wait((to_upstream, to_client), return_when=asyncio.FIRST_COMPLETED)
            if self._stopping:
                pass  # interrupted: the daemon closed it
            elif ended and ended[0] == "client":
                outcome, why = Outcome.CLIENT_DISCONNECTED, "the client closed the socket before the answer ended"
            elif ended:
                outcome, why = Outcome.UPSTREAM_RESET, "the upstream closed the socket before the answer ended"
        finally:
            for task in (to_upstream, to_client):
                task.cancel()
            for task in (to_upstream, to_client):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for ws in (upstream, client):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT)
            calls.closed(outcome, why)


async def _pump(src: _Socket, dst: _Socket, on_text: Callable[[str], str], ended: list[str], side: str) -> None:
    """Pass messages from ``src`` to ``dst`` until ``src`` closes; a close is passed on too. A text
    goes on as ``on_text`` returns it (the text itself, but for a diagnosis asked for upstream).
    The first side to close or break is appended to ``ended``."""
    while True:
        msg = await src.receive()
        kind = msg.type
        if kind in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR) and not ended:
            ended.append(side)
        if kind == WSMsgType.TEXT:
            await dst.send_str(on_text(msg.data))
        elif kind == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        elif kind == WSMsgType.PING:
            await dst.ping(msg.data)
        elif kind == WSMsgType.PONG:
            await dst.pong(msg.data)
        elif kind == WSMsgType.CLOSE:
            with contextlib.suppress(Exception):
                await dst.close(code=msg.data or aiohttp.WSCloseCode.OK, message=(msg.extra or "").encode())
            return
        else:  # CLOSING, CLOSED, ERROR: this side is gone
            return
