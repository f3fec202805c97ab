"""The daemon's side of its store reader: a child process that answers the UI's store routes.

What a read loads (sqlite-utils, the views, the price table, the analyses: ~21 MB of code) and the
heap a big read leaves (a 5 MB transcript, a diff of multi-MB bodies) never went back to the system
from the daemon's own process: after big reads it rested at 83 MB against 44 MB before any read.
So ``serve`` forwards each store route, once checked (host, key, token: ``routes.py``), to
``reader_child.py`` over an owner-only unix socket: the child starts with the first such request
(about a second), and ``stop_after`` seconds after the last one ends it is stopped, and its memory
with it (docs/architecture.md, "Memory"). Deleting a session goes to the writer from here, then
the child empties its body cache so that no body of the session outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from ctxscope.inspector.writer.protocol import Writer, WriterUnavailable
from ctxscope.proxy.defence.identity import address
from ctxscope.web import security

log = logging.getLogger("ctxscope.web")

STOP_AFTER = 20.0  # seconds without a store read before the child is stopped
START_TIMEOUT = 60.0  # seconds a starting child may take (its imports, on a loaded machine)
STOP_TIMEOUT = 10.0  # seconds a stopping child may take before it is killed
STATUS_EVERY = 0.3  # seconds between looks at the writer's status for the child's live feed
POLL = 0.2  # seconds between looks at whether the client is still there
OWN_URL_HEADER = "X-Ctxscope-Own-Url"
FORGET = "/_reader/forget"  # the child's route that empties its body cache
PASSED_BACK = ("Content-Type", "Content-Disposition", "Cache-Control", "Content-Length", "X-Ctxscope-Body")


def _client_gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


async def _while_client_stays(request: web.Request, answer: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The child's answer, chunk by chunk, until it ends or the client goes away. A live feed is
    quiet for up to a heartbeat (15 s) and aiohttp tells a handler of a closed client only when it
    writes: without this look a closed page held the child that long before its idle time began."""
    while True:
        read = asyncio.ensure_future(answer.content.readany())
        while not read.done():
            await asyncio.wait([read], timeout=POLL)
            if not read.done() and _client_gone(request):
                read.cancel()
                raise ConnectionResetError("the client went away")
        chunk = read.result()
        if not chunk:
            return
        yield chunk


def own_url(sockname: object) -> str | None:
    """The daemon's own base URL: the address and port of the socket that accepted this request
    (``transport.get_extra_info("sockname")``), which the daemon listens on. Never the request's
    ``Host``, which the client writes: a key sent there could go anywhere (docs/architecture.md,
    "Replay"). None when the socket has no IP address (closed, or not TCP)."""
    own = address(sockname)
    if own is None:
        return None
    ip, port = own
    return f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}"


async def delete_session(writer: Writer | None, request: web.Request) -> dict:
    """Delete ``?s=`` through the writer, between two of its batches (the store has one writer)."""
    session = request.query.get("s")
    if not session:
        raise web.HTTPBadRequest(text="missing s")
    if writer is None:
        raise web.HTTPServiceUnavailable(text="deleting needs the capture writer, and this UI runs without one")
    try:
        result = await asyncio.to_thread(writer.delete_session, session)
    except WriterUnavailable as exc:
        raise web.HTTPServiceUnavailable(text=str(exc)) from None
    if not result["calls_deleted"]:
        raise web.HTTPNotFound(text=f"no session {session!r}")
    return result


class ReaderChild:
    """Starts the reader on demand, forwards requests to it, stops it once idle."""

    def __init__(self, db_path: Path, idle_release: float | None, status: Callable[[], dict | None], stop_after: float):
        self.db_path = db_path
        self.idle_release = idle_release  # the child's read pool lets go after at most this (web/pool.py)
        self.status = status  # the writer's, for the child's live feed
        self.stop_after = stop_after
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._dir: str | None = None
        self._feed: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self._busy = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future | None = None
        self._answers: set[aiohttp.ClientResponse] = set()  # the child's answers being streamed
        self._closed = False

    @property
    def _guard(self) -> asyncio.Lock:
        """One start or stop of the child at a time (made on the loop that first needs it)."""
        self._lock = self._lock or asyncio.Lock()
        return self._lock

    async def _started(self) -> aiohttp.ClientSession:
        async with self._guard:
            if self._closed:
                raise web.HTTPServiceUnavailable(text="the daemon is stopping")
            if self._proc is not None and self._proc.returncode is None and self._session is not None:
                return self._session
            await self._stop_child()
            self._dir = tempfile.mkdtemp(prefix="ctxscope-reader-")  # owner-only (0700)
            sock = str(Path(self._dir) / "s")
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "ctxscope.web.reader_child",
                    str(self.db_path),
                    sock,
                    "" if self.idle_release is None else str(self.idle_release),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    start_new_session=True,  # a Ctrl-C reaches the daemon, which stops it in order
                )
            except OSError as exc:
                log.error("cannot start the store reader: %s", exc)
                raise web.HTTPServiceUnavailable(text=f"cannot start the store reader: {exc}") from None
            assert self._proc.stdout is not None
            try:
                line = await asyncio.wait_for(self._proc.stdout.readline(), START_TIMEOUT)
            except TimeoutError:
                line = b""
            if line.strip() != b"ready":
                await self._stop_child()
                raise web.HTTPServiceUnavailable(text="the store reader did not start (see the daemon's log)")
            self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock))
            self._feed = asyncio.ensure_future(self._send_status(self._proc))
            return self._session

    async def _send_status(self, proc: asyncio.subprocess.Process) -> None:
        """The writer's status to the child's live feed, as a line each time it changes."""
        assert proc.stdin is not None
        last = None
        with contextlib.suppress(ConnectionError, RuntimeError):
            while proc.returncode is None:
                text = json.dumps(self.status(), sort_keys=True, default=str)
                if text != last:
                    proc.stdin.write(text.encode() + b"\n")
                    await proc.stdin.drain()
                    last = text
                await asyncio.sleep(STATUS_EVERY)

    async def _stop_child(self) -> None:
        proc, self._proc = self._proc, None
        session, self._session = self._session, None
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.cancel()
        if session is not None:
            await session.close()
        if proc is not None and proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()  # its end of file stops it: the live feed ends, computations are killed
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        elif proc is not None:
            await proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _begin(self) -> None:
        self._busy += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _end(self) -> None:
        self._busy -= 1
        if not self._busy and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(self.stop_after, self._idle)

    def _idle(self) -> None:
        self._timer = None
        if not self._busy:
            self._stopping = asyncio.ensure_future(self.restart())

    async def restart(self) -> None:
        """Stop the child unless a read is running (the next read starts a new one)."""
        async with self._guard:
            if not self._busy:
                await self._stop_child()

    async def _request(self, request: web.Request, own: str | None) -> aiohttp.ClientResponse:
        """The child's answer's head; GETs are sent again to a new child if this one went away."""
        body = await request.read() if request.can_read_body else None
        sent = {k: request.headers[k] for k in ("Content-Type", "Accept") if k in request.headers}
        if own is not None:
            sent[OWN_URL_HEADER] = own
        for attempt in (1, 2):
            session = await self._started()
            proc = self._proc
            try:
                return await session.request(
                    request.method,
                    "http://reader" + request.rel_url.path_qs,
                    headers=sent,
                    data=body,
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=START_TIMEOUT),
                )
            except aiohttp.ClientConnectionError as exc:
                if attempt == 2 or request.method != "GET":
                    log.error("the store reader failed: %s", exc)
                    raise web.HTTPServiceUnavailable(text="the store reader failed (see the daemon's log)") from None
                await self._replace(proc)
        raise AssertionError("unreachable")

    async def _replace(self, proc: asyncio.subprocess.Process | None) -> None:
        """Stop ``proc`` if it is still the child: a request could not reach it."""
        async with self._guard:
            if self._proc is proc:
                await self._stop_child()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """``request`` answered by the child, streamed back; given up (the child's side closed)
        when the client goes away before the answer starts (a findings computation is killed)."""
        transport = request.transport
        own = own_url(transport.get_extra_info("sockname") if transport is not None else None)
        self._begin()
        try:
            head = asyncio.ensure_future(self._request(request, own))
            while not head.done():
                await asyncio.wait([head], timeout=POLL)
                if not head.done() and _client_gone(request):
                    head.cancel()
                    raise web.HTTPServiceUnavailable(text="the client went away")
            async with head.result() as answer:
                resp = web.StreamResponse(status=answer.status)
                for name in PASSED_BACK:
                    if name in answer.headers:
                        resp.headers[name] = answer.headers[name]
                security.apply_headers(resp)
                await resp.prepare(request)
                self._answers.add(answer)
                try:
                    async for chunk in _while_client_stays(request, answer):
                        await resp.write(chunk)
                    if self._closed:  # cut by the daemon's stop: the client must not take it for whole
                        raise aiohttp.ClientPayloadError("the daemon is stopping")
                    await resp.write_eof()
                except ConnectionResetError:  # the client went away (aiohttp's errors of the child's side are too)
                    pass
                except aiohttp.ClientError as exc:  # the child went (stopped, or died): the client sees a cut answer
                    if not self._closed:
                        log.warning(
                            "the store reader's answer to %s was cut: %s", request.path, exc or type(exc).__name__
                        )
                    if request.transport is not None:
                        request.transport.abort()
                finally:
                    self._answers.discard(answer)
                return resp
        finally:
            self._end()

    async def forget_bodies(self) -> None:
        """A session was deleted: a running child empties its body cache (a new one has none)."""
        session = self._session
        if session is None:
            return
        self._begin()
        try:
            async with session.post(f"http://reader{FORGET}") as answer:
                await answer.read()
        except aiohttp.ClientError:  # the child went: nothing of it is left either
            pass
        finally:
            self._end()

    async def totals(self) -> dict:
        """The store's totals, for the status route."""
        self._begin()
        try:
            session = await self._started()
            async with session.get("http://reader/_ctxscope/api/status") as answer:
                found = await answer.json()
                if answer.status != 200:
                    raise RuntimeError(found.get("error") if isinstance(found, dict) else answer.status)
                return found
        finally:
            self._end()

    async def close(self) -> None:
        """The daemon stops: so does the child (its streams end, its computations are killed)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for answer in self._answers:  # the streams forwarded end now (closing the session does not end them)
            answer.content.feed_eof()
        await self._stop_child()
