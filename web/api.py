"""The UI's answers that read the capture store: the JSON API's store-backed routes and the live feed.

This module, and with it sqlite-utils, the store's queries and the analyses behind the pages, is
loaded by the first request that needs the store (``routes.py`` mounts every route and loads it
then), so a daemon whose UI nobody opens does not carry them (docs/architecture.md, "Memory").
Every read runs in a worker thread (``pool.py``) so the proxy's event loop never waits on SQLite,
and every answer built from the store is masked in that thread before it is serialised; raw
ranges come from bodies masked length for length (``calldetail``), and a download is masked
unless ``exact=1`` asks for the bytes as they were sent.

A handler returns the answer's data (``routes.py`` serialises it) or a response of its own (a
download, the event stream), and says a bad request with an ``HTTPException``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ctxscope.inspector.pipeline.idle_release import release_reading
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.reading.transcript import transcript
from ctxscope.inspector.share.curl import NoRoute
from ctxscope.inspector.share.replay import ReplayError
from ctxscope.inspector.store.analysis_queries import resolve_session
from ctxscope.inspector.store.derived import titles
from ctxscope.inspector.store.queries import AmbiguousCallId, resolve_call_id
from ctxscope.inspector.store.views import store_totals
from ctxscope.inspector.writer.protocol import Writer
from ctxscope.proxy.redaction.mask import mask_keys_in
from ctxscope.vocab import headers
from ctxscope.web import security
from ctxscope.web.bodytree import PAGE_CHARS, BadPointer, NoNode
from ctxscope.web.calldetail import RANGE_DEFAULT, BodyCache, body_node, call_detail, raw_bytes, raw_range
from ctxscope.web.compute import Computations, ComputeFailed
from ctxscope.web.diffview import call_diff, with_break_cause
from ctxscope.web.export import HarExports
from ctxscope.web.live import LiveHub
from ctxscope.web.overview import list_session_overviews
from ctxscope.web.pool import RELEASE_AFTER, ReadPool
from ctxscope.web.reader import delete_session, own_url
from ctxscope.web.resend import curl_view
from ctxscope.web.resend import replay as send_replay
from ctxscope.web.search import search_view
from ctxscope.web.timeline import PAGE, session_view
from ctxscope.web.usage import usage_view

if TYPE_CHECKING:
    import sqlite_utils

_FILTERS = ("relation", "verdict", "model", "marker", "thread", "q")

Answer = dict | list | web.StreamResponse


def _masked(db: sqlite_utils.Database, fn: Callable[..., Any], *args: Any) -> Any:
    return mask_keys_in(fn(db, *args))


def transcript_view(db: sqlite_utils.Database, session: str, at: str | None, whole: bool) -> dict | None:
    """The transcript's JSON with the session's title; KeyError for a call not in the session."""
    full = resolve_session(db, session) or session
    call = (resolve_call_id(db, at) or at) if at else None
    found = transcript(db, full, call, whole=whole)
    return None if found is None else {**found.as_dict(), "title": titles.title(db, full)}


def _int(request: web.Request, name: str, default: int | None) -> int | None:
    value = request.query.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None


OWN_URL = "ctxscope_own_url"  # the daemon's address, set by the store reader's child (reader_child.py)


def _own_url(request: web.Request) -> str:
    """This daemon's base URL, from the socket the request came in on, never from its Host (in
    the store reader's child: the one the daemon sent, from the socket it took the request on)."""
    transport = request.transport
    url = request.get(OWN_URL) or own_url(transport.get_extra_info("sockname") if transport is not None else None)
    if url is None:
        raise web.HTTPServiceUnavailable(text="the daemon's own address is not known on this connection")
    return url


def _version() -> str:
    """ctxscope's version, for the HAR's creator (the web package does not import the CLI's root)."""
    try:
        return metadata.version("ctxscope")
    except metadata.PackageNotFoundError:
        return "unknown"


def _found(answer: Any, what: str) -> Any:
    if answer is None:
        raise web.HTTPNotFound(text=what)
    return answer


class StoreAPI:
    """The store-backed handlers of one daemon's UI, with their read pool, body cache and live feed."""

    def __init__(
        self,
        db_path: Path,
        writer: Writer | None,
        status: Callable[[], dict | None],
        idle_release: float | None = None,
    ):
        self.bodies = BodyCache()  # emptied with the read pool when it goes idle (pool.py)
        release_after = RELEASE_AFTER if idle_release is None else min(RELEASE_AFTER, idle_release)
        self.pool = ReadPool(
            db_path, SegmentTexts, release_after=release_after, on_release=[self.bodies.clear, release_reading]
        )
        self.computations = Computations(Path(db_path))  # findings and advice: a child each (web/compute.py)
        self.writer = writer
        self.hub = LiveHub(self.pool, status)
        self.exports = HarExports(Path(db_path), SegmentTexts, _version())

    async def answer(self, handler: Callable[[web.Request], Awaitable[Answer]], request: web.Request) -> Answer:
        """``handler``'s answer, with the store's own failures said as HTTP errors."""
        try:
            return await handler(request)
        except AmbiguousCallId as exc:  # the one id rule: say which ids the prefix matches
            listed = ", ".join(exc.candidates) + (", ..." if exc.more else "")
            raise web.HTTPBadRequest(text=f"{exc}: {listed}" if listed else str(exc)) from None
        except sqlite3.DatabaseError as exc:  # the store is unreadable: say so, no traceback
            raise web.HTTPServiceUnavailable(text=f"capture store unavailable: {exc}") from None

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(db, *args)`` in a worker thread, with every key-like value in its answer masked."""
        return await self.pool.run(_masked, fn, *args)

    async def totals(self) -> dict:
        return await self.pool.run(store_totals)

    async def sessions(self, request: web.Request) -> Answer:
        limit = _int(request, "limit", 500) or 500
        purposes = request.query.get("all") == "1"  # the sessions ctxscope made itself too
        return {"sessions": await self.read(lambda db: list_session_overviews(db, limit=limit, purposes=purposes))}

    async def session(self, request: web.Request) -> Answer:
        session = request.query.get("s")
        if not session:
            raise web.HTTPBadRequest(text="missing s")
        filters = {k: request.query[k] for k in _FILTERS if request.query.get(k)}
        offset = _int(request, "offset", None)
        limit = _int(request, "limit", PAGE) or PAGE
        view = await self.read(
            lambda db: session_view(
                db, resolve_session(db, session) or session, offset=offset, limit=limit, filters=filters
            )
        )  # an id or a unique prefix
        return _found(view, f"no session {session!r}")

    async def transcript(self, request: web.Request) -> Answer:
        """A session's transcript (``inspector/reading/transcript.py``): ``?at=CALL`` (an id or a
        unique prefix) reads it at that call, ``?as_seen=1`` without the turns a compaction replaced."""
        session = request.match_info.get("session", "")
        at = request.query.get("at") or None
        whole = request.query.get("as_seen") not in ("1", "true")
        try:
            view = await self.read(transcript_view, session, at, whole)
        except KeyError as exc:
            raise web.HTTPNotFound(text=str(exc.args[0])) from None
        return _found(view, f"no session {session!r}")

    async def usage(self, request: web.Request) -> Answer:
        days = _int(request, "days", None)
        if days is not None and days < 1:
            raise web.HTTPBadRequest(text="days must be 1 or more")
        return await self.read(usage_view, days)

    async def call(self, request: web.Request) -> Answer:
        call_id = request.query.get("id", "")
        return _found(await self.read(call_detail, call_id) if call_id else None, f"no call {call_id!r}")

    async def node(self, request: web.Request) -> Answer:
        """One node of a call's request or response by JSON pointer: a page of text, a slice of a
        list, or a container's outline (``bodytree.node``); 400 for a malformed pointer, 404 for none."""
        call_id, kind, _form = self._body_args(request)
        pointer = request.query.get("ptr", "")
        offset = _int(request, "offset", 0) or 0
        limit = _int(request, "limit", PAGE_CHARS) or PAGE_CHARS
        start = _int(request, "from", None)
        try:
            result = await self.read(body_node, call_id, kind, pointer, offset, limit, start)
        except BadPointer as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        except NoNode as exc:
            raise web.HTTPNotFound(text=str(exc)) from None
        return _found(result, f"no call {call_id!r}")

    def _body_args(self, request: web.Request) -> tuple[str, str, str]:
        kind = request.query.get("kind", "request")
        form = request.query.get("form", "decoded")
        if kind not in ("request", "response") or form not in ("decoded", "wire"):
            raise web.HTTPBadRequest(text="kind must be request|response, form decoded|wire")
        return request.query.get("id", ""), kind, form

    async def raw(self, request: web.Request) -> Answer:
        call_id, kind, form = self._body_args(request)
        offset = _int(request, "offset", 0) or 0
        length = _int(request, "length", RANGE_DEFAULT) or RANGE_DEFAULT
        # not ``read``: the cached bodies are masked already, length for length, so offsets hold
        result = await self.pool.run(raw_range, self.bodies, call_id, kind, form, offset, length)
        return _found(result, f"no call {call_id!r}")

    async def raw_bin(self, request: web.Request) -> Answer:
        call_id, kind, form = self._body_args(request)
        exact = request.query.get("exact") in ("1", "true")
        body = _found(await self.pool.run(raw_bytes, call_id, kind, form, exact), f"no body for {call_id!r}")
        resp = web.Response(body=body.data, content_type="application/octet-stream")
        safe_id = "".join(ch for ch in call_id if ch.isalnum() or ch in "-_")[:80]
        name = f"{safe_id}-{kind}-{body.form}" + ("-exact" if exact else "-masked" if body.masked else "")
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}.bin"'
        resp.headers[headers.BODY] = "exact" if exact else f"{body.form}; keys masked" if body.masked else body.form
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def export_har(self, request: web.Request) -> Answer:
        """The session's HAR as a download, streamed (``web/export.py``); bodies masked as the CLI's."""
        session = request.query.get("s", "")
        if not session:
            raise web.HTTPBadRequest(text="missing s")
        full = _found(await self.pool.run(resolve_session, session), f"no session {session!r}")
        name = "".join(ch for ch in full if ch.isalnum() or ch in "-_")[:80] or "session"
        return await self.exports.stream(request, full, _own_url(request), name)

    async def diff(self, request: web.Request) -> Answer:
        call_id = request.query.get("id", "")
        base = request.query.get("base") or None
        change = _int(request, "change", None)  # one change the whole answer left deferred
        try:
            result = (
                await self.read(lambda db: with_break_cause(db, call_diff(db, call_id, base, change)))
                if call_id
                else None
            )
        except IndexError as exc:
            raise web.HTTPNotFound(text=str(exc)) from None
        return _found(result, f"no call {call_id!r}")

    async def search(self, request: web.Request) -> Answer:
        text = request.query.get("q", "")
        if not text.strip():
            raise web.HTTPBadRequest(text="missing q")
        areas = [a for a in request.query.getall("in", []) if a]
        limit = _int(request, "limit", 50) or 50
        try:
            return await self.read(search_view, text, request.query.get("s") or None, areas, limit)
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None

    async def curl(self, request: web.Request) -> Answer:
        call_id = request.query.get("id", "")
        via_daemon = request.query.get("via") == "daemon"
        try:
            view = await self.read(curl_view, call_id, _own_url(request), via_daemon) if call_id else None
        except NoRoute as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return _found(view, f"no call {call_id!r}")

    async def advisor(self, request: web.Request) -> Answer:
        session = request.query.get("s")
        if not session:
            raise web.HTTPBadRequest(text="missing s")
        view = "findings" if request.path.endswith("/findings") else "advice"

        def client_gone() -> bool:
            return request.transport is None or request.transport.is_closing()

        if view == "findings":  # read from the stored facts in milliseconds, unless they must be taken first
            from ctxscope.inspector.reading.stored_findings import FactsMissing  # (loaded on the first findings asked)
            from ctxscope.web.advice import findings_view

            with contextlib.suppress(FactsMissing):
                return _found(await self.read(findings_view, session, False), f"no session {session!r}")
        try:
            result = await self.computations.run(view, session, client_gone)
        except ComputeFailed as exc:
            raise web.HTTPServiceUnavailable(text=str(exc)) from None
        return _found(result, f"no session {session!r}")

    async def events(self, request: web.Request) -> Answer:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        security.apply_headers(resp)  # before the stream starts
        return await self.hub.stream(request, resp)

    async def delete(self, request: web.Request) -> Answer:
        """Delete a session (the caller checked the page's token)."""
        result = await delete_session(self.writer, request)
        self.bodies = BodyCache()
        return result

    async def replay(self, request: web.Request) -> Answer:
        """Re-send a call through this daemon (the caller checked the page's token)."""
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(text="replaying needs a JSON body")
        try:
            options = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="the body is not JSON") from None
        if not isinstance(options, dict):
            raise web.HTTPBadRequest(text="the body must be a JSON object")
        try:
            result = await send_replay(self.pool, request.query.get("id", ""), _own_url(request), options)
        except ReplayError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return mask_keys_in(result)

    async def close(self) -> None:
        """The live feed's streams end and computations are killed (on the daemon's shutdown)."""
        self.computations.stop()
        await self.hub.close()

    def cleanup(self) -> None:
        self.pool.close()
