"""The hot path: forward one request to its upstream and stream the answer back, byte for byte.

Nothing here parses JSON, hashes bodies or touches SQLite: the handler only copies bytes, keeps a
reference to the chunks it already has in memory, and hands a raw :class:`Exchange` to the sink
once the exchange is over. Compression is passed through untouched on both sides. The pieces:
``headers`` (what crosses), ``relay`` (the answer's way back), ``recorder`` (what is captured).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from yarl import URL

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.defence.hosts import cross_site, host_allowed
from ctxscope.proxy.defence.limits import Limits
from ctxscope.proxy.forward.answers import error_body, gone, refusal
from ctxscope.proxy.forward.ask_diagnosis import DiagnosisAsker, asked_annotation, who_of
from ctxscope.proxy.forward.headers import SANDBOX, annotation, skip_auto_headers, split_request_headers
from ctxscope.proxy.forward.recorder import Recorder
from ctxscope.proxy.forward.relay import abort_client, relay_response
from ctxscope.proxy.forward.routing import Route, RouteError, UnsafePath, named_upstream, resolve
from ctxscope.proxy.forward.upstream import new_session
from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import Outcome

log = logging.getLogger("ctxscope.proxy")

# The route of each raw path seen, bounded: a hostile client may send a new path with every request.
_MAX_ROUTES = 4096
_CLEAN = (Outcome.OK, Outcome.HTTP_ERROR)
# A client's malformed body (bad chunking and the like), as aiohttp's parser reports it.
_BAD_BODY = (HttpProcessingError, RequestPayloadError, asyncio.IncompleteReadError)


@dataclass
class ProxySettings:
    upstreams: dict[str, str]
    salt: bytes
    connect_timeout: float = 30.0
    read_timeout: float = 600.0  # between two chunks: long thinking streams pause for minutes
    limits: Limits = field(default_factory=Limits)
    # Upstreams started on their first request (the built-in simulator): name -> a start that
    # returns the base URL, or None when it could not start (docs/architecture.md, "Memory").
    on_demand: dict[str, Callable[[], Awaitable[str | None]]] = field(default_factory=dict)
    # Remote mode (`serve --allow-remote`): provider routes answer any Host (peers name this
    # machine as they know it); a foreign page's Origin is refused all the same.
    allow_remote: bool = False
    # `serve --ask-diagnosis`: ask the provider for its cache diagnosis on the client's behalf
    # (forward/ask_diagnosis.py); off, the hot path parses nothing.
    ask_diagnosis: bool = False


class UpgradeRelay(Protocol):
    """Who takes a WebSocket upgrade on a provider route (proxy/sockets, set by the server)."""

    async def relay(
        self,
        request: web.Request,
        route: Route,
        query: str,
        headers: list[tuple[str, str]],
        annotations: list[tuple[str, str]],
        label: str | None,
    ) -> web.StreamResponse: ...


class _TooLarge(Exception):
    """A request body over max_body_bytes; the message says how large."""


class Forwarder:
    """Owns the upstream HTTP client and turns requests into forwarded exchanges."""

    def __init__(self, settings: ProxySettings, sink: ex.ExchangeSink):
        self.settings = settings
        self.sink = sink
        self._expect = sink.expect if isinstance(sink, ex.ExpectingSink) else None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[str, str | None] = {}
        # Agents call the same few paths over and over: each one's route, and its upstream URL
        # without a query (made once: yarl's URL costs more than the lookup).
        self._routes: dict[str, tuple[Route, URL | str]] = {}
        self.websockets: UpgradeRelay | None = None
        self.asker = DiagnosisAsker() if settings.ask_diagnosis else None

    def _env_proxy(self, base_url: str) -> str | None:
        """HTTP(S)_PROXY / NO_PROXY for an upstream, looked up once per upstream, not per request
        (aiohttp's trust_env does two thread-pool round trips on every request)."""
        if base_url not in self._proxies:
            parts = urlsplit(base_url)
            host = parts.hostname or ""
            if host in ("localhost", "::1") or host.startswith("127.") or proxy_bypass(host):
                self._proxies[base_url] = None
            else:
                self._proxies[base_url] = getproxies().get(parts.scheme)
        return self._proxies[base_url]

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._session = new_session(self.settings.connect_timeout, self.settings.read_timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _upstreams(self, raw_path: str) -> dict[str, str]:
        """The upstreams, with the one this path names started first if it starts on demand."""
        upstreams = self.settings.upstreams
        if self.settings.on_demand:
            name = named_upstream(raw_path)
            start = self.settings.on_demand.get(name) if name is not None and name not in upstreams else None
            if name is not None and start is not None and (url := await start()) is not None:
                upstreams[name] = url
        return upstreams

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """A request to a provider route from a client of the daemon's own port."""
        return await self._handle(request, intercepted=False)

    async def handle_intercepted(self, request: web.Request) -> web.StreamResponse:
        """A request inside an intercepted CONNECT tunnel: its Host is the provider's, as it must be,
        and no page can open such a tunnel, so the Host and Origin checks do not apply."""
        return await self._handle(request, intercepted=True)

    def _foreign(self, request: web.Request, route: Route) -> web.Response | None:
        """The refusal of a request a foreign page may have sent: a Host that does not name this
        machine (DNS rebinding; any Host in remote mode) or a cross-site Origin (a simple POST, a
        WebSocket), answered in the provider's shape, neither forwarded nor recorded
        (docs/architecture.md, "Provider routes refuse foreign pages")."""
        headers = request.headers
        host = headers.get("Host")
        if not self.settings.allow_remote and not host_allowed(host):
            refused = refusal(
                route,
                403,
                "this daemon answers only requests whose Host names this machine (a DNS-rebinding page names another)",
                "forbidden_host",
            )
        elif cross_site(headers.get("Origin"), headers.get("Sec-Fetch-Site"), request.scheme, host):
            refused = refusal(
                route,
                403,
                "requests from another site's page are refused (the browser's Origin is not this daemon's)",
                "forbidden_origin",
            )
        else:
            return None
        refused.force_close()  # (its body, if any, is not read)
        return refused

    async def _handle(self, request: web.Request, intercepted: bool) -> web.StreamResponse:
        started = time.time()
        raw_path, _, query = request.raw_path.partition("?")  # the query as sent, still percent-encoded
        known = self._routes.get(raw_path)
        if known is None:
            try:
                route = resolve(raw_path, await self._upstreams(raw_path), self.settings.on_demand)
            except RouteError as exc:
                return web.json_response(
                    {"error": {"type": "not_found", "message": f"ctxscope: {exc}"}}, status=404, headers=SANDBOX
                )
            except UnsafePath as exc:
                return refusal(exc.route, 400, str(exc), "invalid_path")
            known = (route, self._target(route, ""))
            if len(self._routes) < _MAX_ROUTES:
                self._routes[raw_path] = known
        route, target = known
        if not intercepted and (refused := self._foreign(request, route)) is not None:
            return refused
        if route.control and not host_allowed(request.headers.get("Host")):
            return refusal(
                route,
                403,
                "the simulator's control endpoints answer only requests whose Host names this machine",
                "forbidden",
            )

        headers, annotations, present = split_request_headers(request.raw_headers)
        if annotations and any(k == Annotation.ASKED_DIAGNOSIS for k, _ in annotations):
            annotations = [(k, v) for k, v in annotations if k != Annotation.ASKED_DIAGNOSIS]  # ours alone
        label = route.session_label or (annotation(annotations, Annotation.SESSION) if annotations else None)
        if (
            self.websockets is not None
            and request.method == "GET"
            and "websocket" in request.headers.get("Upgrade", "").lower()
        ):
            return await self.websockets.relay(request, route, query, headers, annotations, label)
        rec = Recorder(route, request, headers, annotations, label, query, started)
        if self._expect is not None and not route.control:
            self._expect()
        try:
            rec.body = body = await self._read_body(request)
        except _TooLarge as exc:
            return self._too_large(rec, str(exc))
        except ConnectionError as exc:  # the client left, or stalled its body and was cut off
            reason = getattr(request.protocol, "close_reason", None) or f"client disconnected mid-request: {exc}"
            rec.finish(Outcome.CLIENT_DISCONNECTED, f"{reason}; not forwarded")
            self._submit(rec)
            return gone()
        except _BAD_BODY as exc:
            log.info("refused a malformed request body for %s: %s", route.provider, " ".join(str(exc).split())[:200])
            response = refusal(route, 400, f"malformed request body: {exc}", "malformed_body")
            response.force_close()
            return response
        except asyncio.CancelledError:
            rec.finish(Outcome.INTERRUPTED, "the daemon stopped while the request body was arriving; not forwarded")
            self._submit(rec)
            raise

        watch = getattr(request.protocol, "watch", None)
        if watch is not None:  # the guard tells us when the client leaves, so the upstream call stops at once
            if request.transport is None:
                rec.finish(Outcome.CLIENT_DISCONNECTED, "client disconnected before the request was forwarded")
                self._submit(rec)
                return gone()
            rec.task = asyncio.current_task(self._loop)  # (given the loop, it makes no getpid system call)
            watch(rec.client_left)
        session = self._session
        if session is None:
            raise RuntimeError("Forwarder.start() was not awaited")
        asked = None
        if self.asker is not None and not route.control:
            who = who_of(label, headers)
            asked = self.asker.prepare(request.method, route.upstream.name, route.path, headers, body, who)
            if asked is not None:
                headers, body = asked.headers, asked.body  # rec keeps the client's
                if asked.added is not None:
                    rec.annotations = [*rec.annotations, asked_annotation(asked.added)]
        try:
            try:
                upstream = await session.request(
                    request.method,
                    self._target(route, query) if query else target,
                    headers=headers,
                    data=body if body else None,
                    skip_auto_headers=skip_auto_headers(present, bool(body)),
                    allow_redirects=False,
                    proxy=self._env_proxy(route.upstream.base_url),
                )
            except asyncio.CancelledError:
                return self._cancelled(request, rec, submit=True)
            except aiohttp.ConnectionTimeoutError:  # (a TimeoutError too, but no connection was ever made)
                return self._fail(
                    rec,
                    Outcome.UPSTREAM_UNREACHABLE,
                    502,
                    f"upstream unreachable: no connection within {self.settings.connect_timeout:g}s",
                )
            except TimeoutError as exc:
                return self._fail(rec, Outcome.TIMEOUT, 504, f"upstream timed out: {exc!r}")
            except (aiohttp.ClientConnectorError, aiohttp.ClientHttpProxyError) as exc:  # (or the HTTP proxy refused)
                return self._fail(rec, Outcome.UPSTREAM_UNREACHABLE, 502, f"upstream unreachable: {exc}")
            except aiohttp.ClientConnectionError as exc:  # connected, then the connection broke
                return self._fail(
                    rec,
                    Outcome.UPSTREAM_RESET,
                    502,
                    f"upstream connection lost before the response: {exc!r}",
                    code="upstream_reset",
                )
            except aiohttp.ClientResponseError as exc:  # connected, then the answer was not HTTP
                return self._fail(
                    rec,
                    Outcome.UPSTREAM_RESET,
                    502,
                    f"upstream sent a malformed response and the connection was dropped: {exc.message}",
                    code="upstream_reset",
                )
            except (aiohttp.ClientError, OSError) as exc:
                return self._fail(rec, Outcome.UPSTREAM_UNREACHABLE, 502, f"upstream unreachable: {exc}")

            try:
                return await relay_response(request, upstream, rec, self.settings.read_timeout)
            except asyncio.CancelledError:
                return self._cancelled(request, rec)
            finally:
                if rec.outcome in _CLEAN:
                    upstream.release()
                else:  # cancel the upstream request: nobody will read the rest
                    upstream.close()
                if asked is not None and self.asker is not None and rec.outcome == Outcome.OK:
                    encoding = next((v for k, v in rec.response_headers if k.lower() == "content-encoding"), None)
                    self.asker.learn(asked, rec.status, rec.chunks, encoding)
                self._submit(rec)
        finally:
            if watch is not None:
                watch(None)

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole request body, refused past max_body_bytes (before reading when Content-Length says so)."""
        limit = self.settings.limits.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise _TooLarge(
                f"request body of {length} bytes (Content-Length) is over the max_body_bytes limit of {limit} bytes"
            )
        content = request.content
        if not content.is_eof():  # read in large pieces, as aiohttp's own read() does (the body is held whole anyway)
            content.set_read_chunk_size(length or limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            # One piece as the parser gave it, not copied (readany joins all the pieces waiting, and
            # they are joined again below). An empty piece ends the body only at its end: one may end
            # an HTTP chunk, and aiohttp's shared reader of bodiless requests says (b"", True) for ever.
            chunk, _ = await content.readchunk()
            if not chunk:
                if content.at_eof():
                    break
                continue
            size += len(chunk)
            if size > limit:
                raise _TooLarge(f"request body of more than {limit} bytes is over the max_body_bytes limit")
            chunks.append(chunk)
        if len(chunks) == 1:
            return bytes(chunks[0])
        return b"".join(chunks)

    def _too_large(self, rec: Recorder, message: str) -> web.Response:
        """A provider-shaped 413, recorded without the body and with the status the client got; the
        connection closes after it."""
        rec.status = 413
        response = self._fail(rec, Outcome.REQUEST_TOO_LARGE, 413, message, code="request_too_large")
        response.force_close()
        return response

    def _cancelled(self, request: web.Request, rec: Recorder, submit: bool = False) -> web.StreamResponse:
        """The handler was cancelled: by the guard because the client left (recorded, and the
        cancellation ends here), or by the daemon's shutdown (recorded, and it goes on)."""
        if rec.left:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            where = "while the upstream was still answering" if rec.status is None else "mid-response"
            rec.finish(Outcome.CLIENT_DISCONNECTED, f"client disconnected {where}; the upstream request was cancelled")
        else:
            rec.cut(Outcome.INTERRUPTED, "cut by the daemon's shutdown")
            abort_client(request)
        if submit:
            self._submit(rec)
        if not rec.left:
            raise asyncio.CancelledError
        return gone()

    @staticmethod
    def _target(route: Route, query: str) -> URL | str:
        """The upstream URL with path and query as the client encoded them (yarl would re-quote a
        str: %2F in a query became /)."""
        url = route.target_url + ("?" + query if query else "")
        return URL(url, encoded=True) if url.isascii() else url

    def _fail(
        self, rec: Recorder, outcome: Outcome, status: int, message: str, code: str | None = None
    ) -> web.Response:
        rec.finish(outcome, message)
        body = error_body(rec.route, status, message, code)
        rec.synthetic_body = body
        self._submit(rec)
        return web.Response(status=status, body=body, content_type="application/json", headers=SANDBOX)

    def _submit(self, rec: Recorder) -> None:
        if rec.route.control:  # docs/architecture.md, "Control requests are not calls"
            return
        try:
            self.sink.submit(rec.to_exchange(self.settings.salt))
        except Exception:  # the sink promises not to raise; traffic must never depend on it
            log.exception("capture sink failed; the call was forwarded but not recorded")
