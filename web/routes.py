"""Mounting the web UI on the daemon's app: the page at "/", its JSON API under "/_ctxscope/".

Provider routes (/anthropic/, /openai/, /u/, /s/) are the proxy's; nothing here touches them
(no middleware: each UI handler is wrapped instead). Static files live under /_ctxscope/static/.
Every UI response carries the security headers (``security.py``); every read of the store runs in
a worker thread (``pool.py``) so the proxy's event loop never waits on SQLite.

API (all GET, JSON, read-only, except deleting a session):
  /_ctxscope/api/status                 writer counters (store failures) and store totals
  /_ctxscope/api/sessions               sessions with aggregates and nested threads
  /_ctxscope/api/session?s=&offset=&limit=&relation=&verdict=&model=&marker=&thread=&q=
  /_ctxscope/api/call?id=               one call: row, parsed request, final response
  /_ctxscope/api/raw?id=&kind=request|response&form=decoded|wire&offset=&length=
  /_ctxscope/api/raw.bin?id=&kind=&form=&exact=  the body as a download (exact=1: the exact bytes)
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

Bodies are stored byte-exact, so keys a client put inside one are in the store: every answer
built from the store is masked in its worker thread (``read``) before it is serialised, raw
ranges come from bodies masked length for length (``calldetail``), and a download is masked
unless ``exact=1`` asks for the bytes as they were sent.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import sqlite3
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web

from ctxscope.inspector.store.analysis_queries import resolve_session
from ctxscope.inspector.store.queries import AmbiguousCallId
from ctxscope.inspector.store.views import store_totals
from ctxscope.inspector.writer.protocol import Writer, WriterUnavailable
from ctxscope.proxy.redaction.mask import mask_keys_in
from ctxscope.web import security
from ctxscope.web.advice import advice_view, findings_view
from ctxscope.web.calldetail import RANGE_DEFAULT, BodyCache, call_detail, raw_bytes, raw_range
from ctxscope.web.diffview import call_diff, with_break_cause
from ctxscope.web.live import LiveHub, writer_status
from ctxscope.web.overview import list_session_overviews
from ctxscope.web.pool import ReadPool
from ctxscope.web.resend import ReplayError, curl_view
from ctxscope.web.resend import replay as send_replay
from ctxscope.web.search import search_view
from ctxscope.web.timeline import PAGE, session_view
from ctxscope.web.vocabulary import vocabulary_handler

STATIC_DIR = Path(__file__).with_name("static")
API = "/_ctxscope/api"
STATIC = "/_ctxscope/static"
_TOKEN_PLACEHOLDER = "__CTXSCOPE_TOKEN__"
_FILTERS = ("relation", "verdict", "model", "marker", "thread", "q")


def _masked(db, fn, *args):
    return mask_keys_in(fn(db, *args))


def _json(data: Any, status: int = 200) -> web.Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    resp = web.Response(text=body, status=status, content_type="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _int(request: web.Request, name: str, default: int | None) -> int | None:
    value = request.query.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None


class WebUI:
    """The UI's handlers and state for one daemon."""

    def __init__(self, db_path: Path, writer: Writer | None):
        self.pool = ReadPool(db_path)
        self.writer = writer
        self.token = security.new_token()
        self.bodies = BodyCache()
        self.hub = LiveHub(self.pool, writer)
        # Read once: serving them must not touch the disk on the proxy's event loop.
        files = [p for p in STATIC_DIR.iterdir() if p.is_file()] if STATIC_DIR.is_dir() else []
        self.static = {p.name: p.read_bytes() for p in files}
        self.page = self.static.pop("index.html", b"").decode("utf-8").replace(_TOKEN_PLACEHOLDER, self.token)

    # -- every UI route goes through this: host check, errors as JSON, security headers ----

    def guarded(self, handler):
        async def wrapped(request: web.Request) -> web.StreamResponse:
            if not security.host_allowed(request.host):
                return security.apply_headers(web.Response(status=421, text="unknown host"))
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                if request.path.startswith(API):
                    response = _error(exc.status, exc.text or exc.reason)
                else:
                    response = web.Response(status=exc.status, text=exc.text or exc.reason)
            except AmbiguousCallId as exc:  # the one id rule: say which ids the prefix matches
                listed = ", ".join(exc.candidates) + (", ..." if exc.more else "")
                response = _error(400, f"{exc}: {listed}" if listed else str(exc))
            except sqlite3.DatabaseError as exc:  # the store is unreadable: say so, no traceback
                response = _error(503, f"capture store unavailable: {exc}")
            if not response.prepared:  # the event stream set its headers before it started
                security.apply_headers(response)
            return response

        return wrapped

    async def read(self, fn, *args):
        """``fn(db, *args)`` in a worker thread, with every key-like value in its answer masked."""
        return await self.pool.run(_masked, fn, *args)

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

    # -- API ---------------------------------------------------------------------------------

    async def status(self, request: web.Request) -> web.Response:
        """The writer's live counters and the store's totals; ``?store=0`` leaves out the totals
        (a query over every call) for monitors that poll often."""
        if request.query.get("store") == "0":
            return _json({"writer": writer_status(self.writer)})
        try:
            store = await self.pool.run(store_totals)
        except Exception as exc:  # an unreadable store is what this route must be able to say
            store = {"error": f"{type(exc).__name__}: {exc}"}
        return _json({"writer": writer_status(self.writer), "store": store})

    async def sessions(self, request: web.Request) -> web.Response:
        limit = _int(request, "limit", 500) or 500
        return _json({"sessions": await self.read(lambda db: list_session_overviews(db, limit=limit))})

    async def session(self, request: web.Request) -> web.Response:
        session = request.query.get("s")
        if not session:
            return _error(400, "missing s")
        filters = {k: request.query[k] for k in _FILTERS if request.query.get(k)}
        offset = _int(request, "offset", None)
        limit = _int(request, "limit", PAGE) or PAGE
        view = await self.read(lambda db: session_view(db, resolve_session(db, session) or session, offset=offset,
                                                        limit=limit, filters=filters))  # an id or a unique prefix
        return _error(404, f"no session {session!r}") if view is None else _json(view)

    async def call(self, request: web.Request) -> web.Response:
        call_id = request.query.get("id", "")
        detail = await self.read(call_detail, call_id) if call_id else None
        return _error(404, f"no call {call_id!r}") if detail is None else _json(detail)

    def _body_args(self, request: web.Request) -> tuple[str, str, str]:
        kind = request.query.get("kind", "request")
        form = request.query.get("form", "decoded")
        if kind not in ("request", "response") or form not in ("decoded", "wire"):
            raise web.HTTPBadRequest(text="kind must be request|response, form decoded|wire")
        return request.query.get("id", ""), kind, form

    async def raw(self, request: web.Request) -> web.Response:
        call_id, kind, form = self._body_args(request)
        offset = _int(request, "offset", 0) or 0
        length = _int(request, "length", RANGE_DEFAULT) or RANGE_DEFAULT
        # not ``read``: the cached bodies are masked already, length for length, so offsets hold
        result = await self.pool.run(raw_range, self.bodies, call_id, kind, form, offset, length)
        return _error(404, f"no call {call_id!r}") if result is None else _json(result)

    async def raw_bin(self, request: web.Request) -> web.Response:
        call_id, kind, form = self._body_args(request)
        exact = request.query.get("exact") in ("1", "true")
        body = await self.pool.run(raw_bytes, call_id, kind, form, exact)
        if body is None:
            return _error(404, f"no body for {call_id!r}")
        resp = web.Response(body=body.data, content_type="application/octet-stream")
        safe_id = "".join(ch for ch in call_id if ch.isalnum() or ch in "-_")[:80]
        name = f"{safe_id}-{kind}-{body.form}" + ("-exact" if exact else "-masked" if body.masked else "")
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}.bin"'
        resp.headers["X-Ctxscope-Body"] = (
            "exact" if exact else f"{body.form}; keys masked" if body.masked else body.form
        )
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def diff(self, request: web.Request) -> web.Response:
        call_id = request.query.get("id", "")
        base = request.query.get("base") or None
        result = await self.read(lambda db: with_break_cause(db, call_diff(db, call_id, base))) if call_id else None
        return _error(404, f"no call {call_id!r}") if result is None else _json(result)

    async def search(self, request: web.Request) -> web.Response:
        text = request.query.get("q", "")
        if not text.strip():
            return _error(400, "missing q")
        areas = [a for a in request.query.getall("in", []) if a]
        limit = _int(request, "limit", 50) or 50
        try:
            result = await self.read(search_view, text, request.query.get("s") or None, areas, limit)
        except ValueError as exc:
            return _error(400, str(exc))
        return _json(result)

    async def curl(self, request: web.Request) -> web.Response:
        call_id = request.query.get("id", "")
        via = f"{request.scheme}://{request.host}" if request.query.get("via") == "daemon" else None
        result = await self.read(curl_view, call_id, via) if call_id else None
        return _error(404, f"no call {call_id!r}") if result is None else _json(result)

    async def advisor(self, request: web.Request) -> web.Response:
        session = request.query.get("s")
        if not session:
            return _error(400, "missing s")
        view = findings_view if request.path.endswith("/findings") else advice_view
        result = await self.read(view, session)
        return _error(404, f"no session {session!r}") if result is None else _json(result)

    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        security.apply_headers(resp)
        return await self.hub.stream(request, resp)

    async def delete(self, request: web.Request) -> web.Response:
        if not security.same_origin(request) or not security.token_ok(request, self.token):
            return _error(403, "deleting needs the page's token and a same-origin request")
        session = request.query.get("s")
        if not session:
            return _error(400, "missing s")
        if self.writer is None:
            return _error(503, "deleting needs the capture writer, and this UI runs without one")
        try:  # the writer deletes, between two of its batches: the store has one writer
            result = await asyncio.to_thread(self.writer.delete_session, session)
        except WriterUnavailable as exc:
            return _error(503, str(exc))
        if not result["calls_deleted"]:
            return _error(404, f"no session {session!r}")
        self.bodies = BodyCache()
        return _json(result)

    async def replay(self, request: web.Request) -> web.Response:
        if not security.same_origin(request) or not security.token_ok(request, self.token):
            return _error(403, "replaying needs the page's token and a same-origin request")
        if request.content_type != "application/json":
            return _error(415, "replaying needs a JSON body")
        try:
            options = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(options, dict):
            return _error(400, "the body must be a JSON object")
        try:
            result = await send_replay(self.pool, request.query.get("id", ""), f"{request.scheme}://{request.host}",
                                       options)  # fmt: skip
        except ReplayError as exc:
            return _error(400, str(exc))
        return _json(mask_keys_in(result))

    async def on_shutdown(self, app: web.Application) -> None:
        await self.hub.close()

    async def on_cleanup(self, app: web.Application) -> None:
        self.pool.close()


def add_web_routes(app: web.Application, db_path: Path, writer: Writer | None) -> None:
    """Mount the UI at "/" and its API under "/_ctxscope/" on the daemon's app (before it starts)."""
    ui = WebUI(Path(db_path), writer)
    app.on_shutdown.append(ui.on_shutdown)
    app.on_cleanup.append(ui.on_cleanup)
    routes = [
        ("GET", "/", ui.index),
        ("GET", "/favicon.ico", ui.favicon),
        ("GET", f"{STATIC}/{{name}}", ui.static_file),
        ("GET", f"{API}/status", ui.status),
        ("GET", f"{API}/sessions", ui.sessions),
        ("GET", f"{API}/session", ui.session),
        (hdrs.METH_DELETE, f"{API}/session", ui.delete),
        (hdrs.METH_POST, f"{API}/replay", ui.replay),
        ("GET", f"{API}/call", ui.call),
        ("GET", f"{API}/raw", ui.raw),
        ("GET", f"{API}/raw.bin", ui.raw_bin),
        ("GET", f"{API}/diff", ui.diff),
        ("GET", f"{API}/events", ui.events),
        ("GET", f"{API}/search", ui.search),
        ("GET", f"{API}/curl", ui.curl),
        ("GET", f"{API}/vocabulary", vocabulary_handler),
        ("GET", f"{API}/findings", ui.advisor),
        ("GET", f"{API}/advice", ui.advisor),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, ui.guarded(handler))
