"""The hot path: forward one request to its upstream and stream the answer back, byte for byte.

Nothing here parses JSON, hashes bodies or touches SQLite: the handler only copies bytes, keeps a
reference to the chunks it already has in memory, and hands a raw :class:`Exchange` to the sink
once the exchange is over. Compression is passed through untouched on both sides.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from multidict import CIMultiDict
from yarl import URL

from . import exchange as ex
from .answers import SANDBOX, error_body, gone, refusal
from .hosts import host_allowed
from .ids import new_call_id
from .limits import Limits
from .redact import extract_api_key, fingerprint, redact_headers, redact_query
from .routing import Route, RouteError, UnsafePath, resolve
from .upstream import new_session

log = logging.getLogger("ctxscope.proxy")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# aiohttp sets these itself for the upstream request (Host from the URL, length from the body).
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
_RESPONSE_DROP = HOP_BY_HOP
_NO_BODY_STATUS = frozenset({204, 304})
# Never let aiohttp invent headers the client did not send. Telling aiohttp so costs it a few
# copies per request, so it is only told when one of them is missing (clients rarely omit any).
_SKIP_AUTO = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
_AUTO_BITS = {"accept": 1, "accept-encoding": 2, "user-agent": 4, "content-type": 8}
_AUTO_WITHOUT_BODY, _AUTO_WITH_BODY = 7, 15  # aiohttp adds Content-Type only to a body
ANNOTATION_PREFIX = "x-ctxscope-"
_CLEAN = (ex.OK, ex.HTTP_ERROR)
# A client's malformed body (bad chunking and the like), as aiohttp's parser reports it.
_BAD_BODY = (HttpProcessingError, RequestPayloadError, asyncio.IncompleteReadError)


@dataclass
class ProxySettings:
    upstreams: dict[str, str]
    salt: bytes
    connect_timeout: float = 30.0
    read_timeout: float = 600.0  # between two chunks: long thinking streams pause for minutes
    limits: Limits = field(default_factory=Limits)


class _TooLarge(Exception):
    """A request body over max_body_bytes; the message says how large."""


class Forwarder:
    """Owns the upstream HTTP client and turns requests into forwarded exchanges."""

    def __init__(self, settings: ProxySettings, sink: ex.ExchangeSink):
        self.settings = settings
        self.sink = sink
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}
        self._routes: dict[str, Route] = {}  # agents call the same few paths over and over

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
        self._session = new_session(self.settings.connect_timeout, self.settings.read_timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.time()
        raw_path, _, query = request.raw_path.partition("?")  # the query as sent, still percent-encoded
        route = self._routes.get(raw_path)
        if route is None:
            try:
                route = resolve(raw_path, self.settings.upstreams)
            except RouteError as exc:
                return web.json_response({"error": {"type": "not_found", "message": f"ctxscope: {exc}"}}, status=404,
                                         headers=SANDBOX)
            except UnsafePath as exc:
                return refusal(exc.route, 400, str(exc), "invalid_path")
            if len(self._routes) < _MAX_NAMES:
                self._routes[raw_path] = route
        if route.control and not host_allowed(request.headers.get("Host")):
            return refusal(route, 403, "the simulator's control endpoints answer only requests whose Host names "
                                       "this machine", "forbidden")

        headers, annotations, present = _split_headers(request.raw_headers)
        label = route.session_label or _annotation(annotations, "x-ctxscope-session")
        rec = _Recorder(route, request, headers, annotations, label, b"", query, started)
        try:
            rec.body = body = await self._read_body(request)
        except _TooLarge as exc:
            return self._too_large(rec, str(exc))
        except ConnectionError as exc:  # the client left, or stalled its body and was cut off
            reason = getattr(request.protocol, "close_reason", None) or f"client disconnected mid-request: {exc}"
            rec.finish(ex.CLIENT_DISCONNECTED, f"{reason}; not forwarded")
            self._submit(rec)
            return gone()
        except _BAD_BODY as exc:
            log.info("refused a malformed request body for %s: %s", route.provider, " ".join(str(exc).split())[:200])
            response = refusal(route, 400, f"malformed request body: {exc}", "malformed_body")
            response.force_close()
            return response
        except asyncio.CancelledError:
            rec.finish(ex.INTERRUPTED, "the daemon stopped while the request body was arriving; not forwarded")
            self._submit(rec)
            raise

        watch = getattr(request.protocol, "watch", None)
        if watch is not None:  # the guard tells us when the client leaves, so the upstream call stops at once
            if request.transport is None:
                rec.finish(ex.CLIENT_DISCONNECTED, "client disconnected before the request was forwarded")
                self._submit(rec)
                return gone()
            rec.task = asyncio.current_task()
            watch(rec.client_left)
        try:
            needed = _AUTO_WITH_BODY if body else _AUTO_WITHOUT_BODY
            try:
                upstream = await self._session.request(
                    request.method,
                    self._target(route, query),
                    headers=headers,
                    data=body if body else None,
                    skip_auto_headers=None if present & needed == needed else _SKIP_AUTO,
                    allow_redirects=False,
                    proxy=self._env_proxy(route.upstream.base_url),
                )
            except asyncio.CancelledError:
                return self._cancelled(request, rec, submit=True)
            except aiohttp.ConnectionTimeoutError:  # (a TimeoutError too, but no connection was ever made)
                return self._fail(rec, ex.UPSTREAM_UNREACHABLE, 502,
                                  f"upstream unreachable: no connection within {self.settings.connect_timeout:g}s")
            except asyncio.TimeoutError as exc:
                return self._fail(rec, ex.TIMEOUT, 504, f"upstream timed out: {exc!r}")
            except (aiohttp.ClientConnectorError, aiohttp.ClientHttpProxyError) as exc:  # (or the HTTP proxy refused)
                return self._fail(rec, ex.UPSTREAM_UNREACHABLE, 502, f"upstream unreachable: {exc}")
            except aiohttp.ClientConnectionError as exc:  # connected, then the connection broke
                return self._fail(rec, ex.UPSTREAM_RESET, 502,
                                  f"upstream connection lost before the response: {exc!r}", code="upstream_reset")
            except aiohttp.ClientResponseError as exc:  # connected, then the answer was not HTTP
                return self._fail(rec, ex.UPSTREAM_RESET, 502, "upstream sent a malformed response and the "
                                  f"connection was dropped: {exc.message}", code="upstream_reset")
            except (aiohttp.ClientError, OSError) as exc:
                return self._fail(rec, ex.UPSTREAM_UNREACHABLE, 502, f"upstream unreachable: {exc}")

            try:
                return await self._stream(request, upstream, rec)
            except asyncio.CancelledError:
                return self._cancelled(request, rec)
            finally:
                if rec.outcome in _CLEAN:
                    upstream.release()
                else:  # cancel the upstream request: nobody will read the rest
                    upstream.close()
                self._submit(rec)
        finally:
            if watch is not None:
                watch(None)

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole request body, refused past max_body_bytes (before reading when Content-Length says so)."""
        limit = self.settings.limits.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise _TooLarge(f"request body of {length} bytes (Content-Length) is over the max_body_bytes limit "
                            f"of {limit} bytes")
        content = request.content
        if not content.is_eof():  # read in large pieces, as aiohttp's own read() does (the body is held whole anyway)
            content.set_read_chunk_size(length or limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise _TooLarge(f"request body of more than {limit} bytes is over the max_body_bytes limit")
            chunks.append(chunk)
        if len(chunks) == 1:
            return bytes(chunks[0])
        return b"".join(chunks)

    def _too_large(self, rec: "_Recorder", message: str) -> web.Response:
        """A provider-shaped 413, recorded without the body; the connection closes after it."""
        response = self._fail(rec, ex.REQUEST_TOO_LARGE, 413, message, code="request_too_large")
        response.force_close()
        return response

    def _cancelled(self, request: web.Request, rec: "_Recorder", submit: bool = False) -> web.StreamResponse:
        """The handler was cancelled: by the guard because the client left (recorded, and the
        cancellation ends here), or by the daemon's shutdown (recorded, and it goes on)."""
        if rec.left:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            where = "while the upstream was still answering" if rec.status is None else "mid-response"
            rec.finish(ex.CLIENT_DISCONNECTED, f"client disconnected {where}; the upstream request was cancelled")
        else:
            rec.finish(ex.INTERRUPTED, "cut by the daemon's shutdown")
            _abort_client(request)
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

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse, rec: "_Recorder"):
        rec.status = status = upstream.status
        rec.response_headers = received = tuple(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.raw_headers]
        )
        headers = CIMultiDict([(n, v) for n, v in received if not _response_drop(n)])
        headers.add("Content-Security-Policy", "sandbox")  # beside any policy of the upstream's own
        headers["X-Content-Type-Options"] = "nosniff"
        rec.outcome = ex.OK if status < 400 else ex.HTTP_ERROR
        content = upstream.content
        if _complete(request, upstream, content):
            return await self._answer_whole(request, upstream, headers, rec)
        response = web.StreamResponse(status=status, reason=upstream.reason, headers=headers)
        try:
            await response.prepare(request)
        except (ConnectionError, RuntimeError) as exc:
            rec.finish(ex.CLIENT_DISCONNECTED, f"client went away before headers: {exc}")
            return response
        chunks = rec.chunks
        try:
            async for chunk in content.iter_any():
                if rec.first_byte_at is None:
                    rec.first_byte_at = time.time()
                chunks.append(chunk)
                await response.write(chunk)
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
            rec.finish(ex.CLIENT_DISCONNECTED, f"client disconnected: {exc}")
            return response
        except asyncio.TimeoutError:
            rec.finish(ex.TIMEOUT, f"no data from upstream for {self.settings.read_timeout:g}s")
            _abort_client(request)
            return response
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
            rec.finish(ex.UPSTREAM_RESET, f"upstream connection lost mid-response: {exc}")
            _abort_client(request)
            return response
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            rec.finish(ex.CLIENT_DISCONNECTED, f"client disconnected at the end: {exc}")
            return response
        rec.finish(rec.outcome, None)
        return response

    async def _answer_whole(self, request, upstream, headers, rec: "_Recorder") -> web.Response:
        """The whole body came with the headers: send both in one write (nothing is held back)."""
        body = upstream.content.read_nowait()
        if body:
            rec.first_byte_at = time.time()
            rec.chunks.append(body)
        response = web.Response(status=upstream.status, reason=upstream.reason, headers=headers, body=body)
        try:
            await response.prepare(request)
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            rec.finish(ex.CLIENT_DISCONNECTED, f"client went away before the answer: {exc}")
            return response
        rec.finish(rec.outcome, None)
        return response

    def _fail(self, rec: "_Recorder", outcome: str, status: int, message: str, code: str | None = None) -> web.Response:
        rec.finish(outcome, message)
        body = error_body(rec.route, status, message, code)
        rec.status = None
        rec.synthetic_body = body
        self._submit(rec)
        return web.Response(status=status, body=body, content_type="application/json", headers=SANDBOX)

    def _submit(self, rec: "_Recorder") -> None:
        try:
            self.sink.submit(rec.to_exchange(self.settings.salt))
        except Exception:  # the sink promises not to raise; traffic must never depend on it
            log.exception("capture sink failed; the call was forwarded but not recorded")


class _Recorder:
    """What the handler learns about one exchange, turned into an Exchange at the end."""

    def __init__(self, route: Route, request: web.Request, headers, annotations, label, body, query, started):
        self.route = route
        self.method = request.method
        self.headers = headers
        self.annotations = annotations
        self.label = label
        self.body = body
        self.query = query
        self.started = started
        self.status: int | None = None
        self.response_headers: tuple[tuple[str, str], ...] = ()
        self.chunks: list[bytes] = []
        self.first_byte_at: float | None = None
        self.ended_at: float | None = None
        self.outcome = ex.OK
        self.error: str | None = None
        self.synthetic_body: bytes | None = None
        self.task: asyncio.Task | None = None  # the handler, cancelled when its client leaves
        self.left = False

    def client_left(self) -> None:
        """The client closed its connection: stop waiting for (and paying for) the upstream's answer."""
        if self.ended_at is None and self.task is not None:
            self.left = True
            self.task.cancel()

    def finish(self, outcome: str, error: str | None) -> None:
        if self.ended_at is None:
            self.ended_at = time.time()
            self.outcome = outcome
            self.error = error

    def to_exchange(self, salt: bytes) -> ex.Exchange:
        """Built after the response is done: secrets are removed here, off the forwarding path."""
        self.finish(self.outcome, self.error)
        user_agent = next((v for k, v in self.headers if k.lower() == "user-agent"), None)
        extra = {"proxy_error_body": self.synthetic_body.decode()} if self.synthetic_body else {}
        return ex.Exchange(
            id=new_call_id(),
            provider=self.route.provider,
            upstream=self.route.upstream.base_url,
            method=self.method,
            path=self.route.path,
            query=redact_query(self.query),
            session_label=self.label,
            annotations=tuple(self.annotations),
            request_headers=redact_headers(self.headers),
            key_fingerprint=fingerprint(extract_api_key(self.headers, self.query), salt),
            request_body=self.body,
            status=self.status,
            response_headers=self.response_headers,
            response_body=b"".join(self.chunks),
            started_at=self.started,
            first_byte_at=self.first_byte_at,
            ended_at=self.ended_at,
            outcome=self.outcome,
            error=self.error,
            client=user_agent,
            extra=extra,
        )


def _complete(request: web.Request, upstream: aiohttp.ClientResponse, content) -> bool:
    """True when the upstream's whole Content-Length body is already here (typical of small JSON)."""
    return (
        content.is_eof()
        and content.exception() is None
        and upstream.content_length is not None
        and upstream.content_length == content.total_bytes
        and upstream.status not in _NO_BODY_STATUS
        and request.method != "HEAD"
    )


# Header names as spelled on the wire -> (name, lowercase name, kind, auto-header bit); clients send
# the same few on every call.
_FORWARD, _DROP, _ANNOTATION = 0, 1, 2
_request_names: dict[bytes, tuple[str, str, int, int]] = {}
_response_drops: dict[str, bool] = {}
_MAX_NAMES = 4096


def _request_name(raw: bytes) -> tuple[str, str, int, int]:
    known = _request_names.get(raw)
    if known is None:
        name = raw.decode("latin-1")
        lname = name.lower()
        kind = _ANNOTATION if lname.startswith(ANNOTATION_PREFIX) else _DROP if lname in _REQUEST_DROP else _FORWARD
        known = (name, lname, kind, _AUTO_BITS.get(lname, 0))
        if len(_request_names) < _MAX_NAMES:
            _request_names[raw] = known
    return known


def _response_drop(name: str) -> bool:
    drop = _response_drops.get(name)
    if drop is None:
        drop = name.lower() in _RESPONSE_DROP
        if len(_response_drops) < _MAX_NAMES:
            _response_drops[name] = drop
    return drop


def _split_headers(raw_headers) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """Headers to forward (original case and order), the x-ctxscope-* annotations to strip, and
    which of the headers aiohttp would otherwise add are present (_AUTO_BITS)."""
    forward, annotations, present = [], [], 0
    for k, v in raw_headers:
        name, lname, kind, bit = _request_name(k)
        if kind == _FORWARD:
            forward.append((name, v.decode("latin-1")))
            present |= bit
        elif kind == _ANNOTATION:
            annotations.append((lname, v.decode("latin-1")))
    return forward, annotations, present


def _annotation(annotations: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in annotations if k == name), None)


def _abort_client(request: web.Request) -> None:
    """Give the client the same truncation the upstream gave us: close without a clean end."""
    transport = request.transport
    if transport is not None:
        transport.abort()
