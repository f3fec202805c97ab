"""Mounting the web UI on the daemon's app: the page at "/", its JSON API under "/_ctxscope/".

Provider routes (/anthropic/, /openai/, /u/, /s/) are the proxy's; nothing here touches them
(no middleware: each UI handler is wrapped instead). Static files live under /_ctxscope/static/.
Every UI response carries the security headers (``security.py``). The routes that read the store
are answered by ``api.py``: in ``serve``, in the store reader's child (``reader.py``), elsewhere
loaded by the first of them (in a worker thread, so forwarding goes on meanwhile). Either way a
daemon whose UI nobody opens imports neither sqlite-utils nor the store's queries nor the analyses
behind the pages (docs/architecture.md, "Memory"). The page, its static files,
the vocabulary and ``status?store=0`` (the launcher's probe) need none of them.

API (all GET, JSON, read-only, except deleting a session):
  /_ctxscope/api/status?nonce=           writer counters (store failures) and store totals; with a
                                        nonce, the proof that this is the user's daemon (proxy/defence/identity.py)
  /_ctxscope/api/sessions               sessions with aggregates and nested threads
  /_ctxscope/api/session?s=&offset=&limit=&relation=&verdict=&model=&marker=&thread=&q=
  /_ctxscope/api/sessions/<id>/transcript?at=&as_seen=  the conversation as turns (inspector/reading/transcript.py)
  /_ctxscope/api/usage?days=             tokens, cache reads and dollars per day and per model (web/usage.py)
  /_ctxscope/api/call?id=               one call: row, outlines of its request and final response
  /_ctxscope/api/node?id=&kind=&ptr=&offset=&limit=&from=  one node of a body by JSON pointer, paged
  /_ctxscope/api/raw?id=&kind=request|response&form=decoded|wire&offset=&length=
  /_ctxscope/api/raw.bin?id=&kind=&form=&exact=  the body as a download (exact=1: the exact bytes)
  /_ctxscope/api/export.har?s=          the session's HAR as a download, streamed (web/export.py)
  /_ctxscope/api/diff?id=&base=         call vs its predecessor (or ``base``)
  /_ctxscope/api/events                 Server-Sent Events: new calls, status
  /_ctxscope/api/vocabulary             the word lists of ctxscope.vocab (web/vocabulary.py)
  /_ctxscope/api/search?q=&s=&in=&limit=  full-text search hits (web/search.py)
  /_ctxscope/api/curl?id=&via=daemon    the call's request as a curl command (web/resend.py)
  /_ctxscope/api/findings?s=            a session's findings and their kinds per call (web/advice.py)
  /_ctxscope/api/advice?s=              the cache advisor's alternatives for a session
  (HTTP delete) /_ctxscope/api/session?s=  needs the page's token header and a same-origin request
  (HTTP post) /_ctxscope/api/replay?id=    re-send a call through this daemon (web/resend.py); the
                                        same token, a JSON body ({model, edits}), a same-origin request

Bodies are stored byte-exact, so keys a client put inside one are in the store: ``api.py`` says how
every answer built from the store is masked.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web

from ctxscope.inspector.writer.protocol import Writer
from ctxscope.proxy.defence import identity
from ctxscope.proxy.defence.hosts import host_allowed
from ctxscope.web import security
from ctxscope.web.reader import STOP_AFTER, ReaderChild, delete_session
from ctxscope.web.vocabulary import vocabulary_handler

if TYPE_CHECKING:
    from ctxscope.web.api import Answer, StoreAPI

# A store route: which of ``StoreAPI``'s handlers answers it, picked from the API once it is loaded
# (``api.py`` loads with the first such request; docs/architecture.md, "Memory").
StoreRoute = Callable[["StoreAPI"], Callable[[web.Request], Awaitable["Answer"]]]

STATIC_DIR = Path(__file__).with_name("static")
API = "/_ctxscope/api"
STATIC = "/_ctxscope/static"
STORE_ROUTES: list[tuple[str, str, StoreRoute]] = [
    ("GET", f"{API}/sessions", lambda api: api.sessions),
    ("GET", f"{API}/session", lambda api: api.session),
    ("GET", f"{API}/sessions/{{session}}/transcript", lambda api: api.transcript),
    (hdrs.METH_DELETE, f"{API}/session", lambda api: api.delete),
    (hdrs.METH_POST, f"{API}/replay", lambda api: api.replay),
    ("GET", f"{API}/usage", lambda api: api.usage),
    ("GET", f"{API}/call", lambda api: api.call),
    ("GET", f"{API}/node", lambda api: api.node),
    ("GET", f"{API}/raw", lambda api: api.raw),
    ("GET", f"{API}/raw.bin", lambda api: api.raw_bin),
    ("GET", f"{API}/export.har", lambda api: api.export_har),
    ("GET", f"{API}/diff", lambda api: api.diff),
    ("GET", f"{API}/events", lambda api: api.events),
    ("GET", f"{API}/search", lambda api: api.search),
    ("GET", f"{API}/curl", lambda api: api.curl),
    ("GET", f"{API}/findings", lambda api: api.advisor),
    ("GET", f"{API}/advice", lambda api: api.advisor),
]
CHANGES = {(hdrs.METH_DELETE, f"{API}/session"): "deleting", (hdrs.METH_POST, f"{API}/replay"): "replaying"}
_TOKEN_PLACEHOLDER = "__CTXSCOPE_TOKEN__"
_TOKEN_HEADER_PLACEHOLDER = "__CTXSCOPE_TOKEN_HEADER__"  # the page learns the header's name from vocab
log = logging.getLogger("ctxscope.web")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, status: int = 200) -> web.Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    resp = web.Response(text=body, status=status, content_type="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status)


def json_errors(handler: Handler) -> Handler:
    """``handler`` with its HTTP errors said as JSON under the API (as text elsewhere)."""

    async def answered(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            if request.path.startswith(API):
                return _error(exc.status, exc.text or exc.reason)
            return web.Response(status=exc.status, text=exc.text or exc.reason)

    return answered


def writer_status(writer: Writer | None) -> dict | None:
    """The writer's live counters for the pages, with their failures summed."""
    if writer is None:
        return None
    try:
        stats = asdict(writer.stats())
    except Exception:  # a writer without stats: nothing to show
        return None
    stats["failures"] = sum(stats.get(k) or 0 for k in ("failed", "dropped", "store_failures"))
    return stats


class WebUI:
    """The UI's handlers and state for one daemon; the store-backed ones are ``StoreAPI``'s."""

    def __init__(
        self,
        db_path: Path,
        writer: Writer | None,
        remote_key: str | None = None,
        secret: bytes | None = None,
        idle_release: float | None = None,
        reads_in_child: bool = False,
    ):
        self.db_path = db_path
        self.idle_release = idle_release  # the read pool lets go after at most this (web/pool.py)
        self.writer = writer
        self.remote_key = remote_key  # remote mode: every route needs it (security.py)
        self.secret = secret  # the home's daemon secret, by which the launcher knows its daemon
        self.token = security.new_token()
        self._api: StoreAPI | None = None
        self._loading: asyncio.Lock | None = None
        self.reader: ReaderChild | None = None  # `serve`: the store routes are answered by a child (web/reader.py)
        if reads_in_child:
            stop_after = STOP_AFTER if idle_release is None else min(STOP_AFTER, idle_release)
            self.reader = ReaderChild(db_path, idle_release, lambda: writer_status(self.writer), stop_after)
        # Read once: serving them must not touch the disk on the proxy's event loop.
        files = [p for p in STATIC_DIR.iterdir() if p.is_file()] if STATIC_DIR.is_dir() else []
        self.static = {p.name: p.read_bytes() for p in files}
        page = self.static.pop("index.html", b"").decode("utf-8")
        page = page.replace(_TOKEN_HEADER_PLACEHOLDER, security.TOKEN_HEADER)
        self.page = page.replace(_TOKEN_PLACEHOLDER, self.token)

    async def api(self) -> StoreAPI:
        """The store-backed handlers, loaded by the first request that needs them."""
        if self._api is None:
            self._loading = self._loading or asyncio.Lock()
            async with self._loading:  # concurrent first requests wait for one load
                if self._api is None:
                    module = await asyncio.to_thread(importlib.import_module, "ctxscope.web.api")
                    self._api = module.StoreAPI(
                        self.db_path, self.writer, lambda: writer_status(self.writer), self.idle_release
                    )
        return self._api

    # -- every UI route goes through this: host check, errors as JSON, security headers ----

    def guarded(self, handler: Handler) -> Handler:
        answered = json_errors(handler)

        async def wrapped(request: web.Request) -> web.StreamResponse:
            refused = self._refusal(request)
            if refused is not None:
                return security.apply_headers(refused)
            response = await answered(request)
            if not response.prepared:  # the event stream set its headers before it started
                security.apply_headers(response)
            return response

        return wrapped

    def _refusal(self, request: web.Request) -> web.Response | None:
        """Who may not have this route: locally, a foreign Host (DNS rebinding); in remote mode,
        whoever lacks the key (its cookie is bound to the name it was set under, so a rebinding
        page has none), which ``/?key=KEY`` sets."""
        if self.remote_key is None:
            if not host_allowed(request.host):
                return web.Response(status=421, text="unknown host")
            return None
        if security.key_ok(request, self.remote_key):
            return None
        sent = request.query.get(security.KEY_QUERY) if request.path == "/" else None
        if sent is not None and security.secret_matches(sent, self.remote_key):
            return security.login_page(self.remote_key)
        return security.unauthorised(request.path.startswith(API))

    def from_store(self, route: StoreRoute, *, change: str | None = None) -> Handler:
        """The handler of a route ``StoreAPI`` answers; ``change`` (what it does, "deleting"): a change,
        which needs the page's token and a same-origin request."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if change and not (security.same_origin(request) and security.token_ok(request, self.token)):
                return _error(403, f"{change} needs the page's token and a same-origin request")
            if self.reader is not None:
                if request.method == hdrs.METH_DELETE:  # the writer deletes; the child's cached bodies go
                    deleted = await delete_session(self.writer, request)
                    await self.reader.forget_bodies()
                    return json_response(deleted)
                return await self.reader.forward(request)
            api = await self.api()
            answer = await api.answer(route(api), request)
            return answer if isinstance(answer, web.StreamResponse) else json_response(answer)

        return handler

    # -- the page ----------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        resp = web.Response(text=self.page, content_type="text/html")
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = self.static.get(name)
        if body is None:
            raise web.HTTPNotFound()
        ctype = (
            "text/javascript" if name.endswith(".js") else mimetypes.guess_type(name)[0] or "application/octet-stream"
        )
        resp = web.Response(body=body, content_type=ctype, charset="utf-8" if ctype.startswith("text/") else None)
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    async def favicon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def status(self, request: web.Request) -> web.Response:
        """The writer's live counters and the store's totals; ``?store=0`` leaves out the totals
        (a query over every call, which loads the store's side) for monitors that poll often."""
        nonce = request.query.get("nonce")
        proof = self.identity(request, nonce) if nonce is not None else None
        if request.query.get("store") == "0":
            return json_response(
                {"writer": writer_status(self.writer), **proof} if proof else {"writer": writer_status(self.writer)}
            )
        try:
            store = await (self.reader.totals() if self.reader is not None else (await self.api()).totals())
        except Exception as exc:  # an unreadable store is what this route must be able to say
            store = {"error": f"{type(exc).__name__}: {exc}"}
        return json_response({"writer": writer_status(self.writer), "store": store, **(proof or {})})

    def identity(self, request: web.Request, nonce: str) -> dict:
        """``{"identity": HMAC}`` over the nonce and the address the question came in on (see
        ``proxy/defence/identity.py``); 400 for a malformed nonce, 503 when the daemon has no secret."""
        if not identity.NONCE.fullmatch(nonce):
            raise web.HTTPBadRequest(text="nonce must be 32 to 128 lowercase hex digits")
        transport = request.transport
        own = identity.address(transport.get_extra_info("sockname") if transport is not None else None)
        if self.secret is None or own is None:
            raise web.HTTPServiceUnavailable(text="this daemon cannot prove who it is (no secret in its home)")
        return {"identity": identity.proof(self.secret, nonce, *own)}

    async def on_shutdown(self, app: web.Application) -> None:
        if self.reader is not None:
            await self.reader.close()
        if self._api is not None:
            await self._api.close()

    async def on_cleanup(self, app: web.Application) -> None:
        if self._api is not None:
            self._api.cleanup()


def add_web_routes(
    app: web.Application,
    db_path: Path,
    writer: Writer | None,
    remote_key: str | None = None,
    *,
    home: Path | None = None,
    idle_release: float | None = None,
    reads_in_child: bool = False,
) -> None:
    """Mount the UI at "/" and its API under "/_ctxscope/" on the daemon's app (before it starts);
    with ``remote_key`` (remote mode) every one of its routes needs that key. ``home``: the
    owner-only folder whose daemon secret the status proves this daemon by; ``idle_release``: the
    read pool lets go of what reads built after at most this many idle seconds (``web/pool.py``)."""
    secret = None
    if home is not None:
        try:
            secret = identity.load_secret(home)
        except OSError as exc:  # the UI works; `ctxscope run` will not use this daemon, and says why
            log.error(
                "cannot read or create the daemon secret in %s (%s): `ctxscope run` cannot use this daemon", home, exc
            )
    ui = WebUI(Path(db_path), writer, remote_key, secret, idle_release, reads_in_child)
    app.on_shutdown.append(ui.on_shutdown)
    app.on_cleanup.append(ui.on_cleanup)
    routes: list[tuple[str, str, Handler]] = [
        ("GET", "/", ui.index),
        ("GET", "/favicon.ico", ui.favicon),
        ("GET", f"{STATIC}/{{name}}", ui.static_file),
        ("GET", f"{API}/status", ui.status),
        ("GET", f"{API}/vocabulary", vocabulary_handler),
        *((m, path, ui.from_store(route, change=CHANGES.get((m, path)))) for m, path, route in STORE_ROUTES),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, ui.guarded(handler))
