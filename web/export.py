"""A session's HAR as a download from the daemon, streamed: memory bounded by one call whatever the
session's size, and the proxy's event loop never waits on it.

A thread of its own (on its own read connection) writes the HAR (``share/har_writer.py``) into
a small queue on the event loop; the handler sends each piece as it comes, and the thread waits
while the queue is full, so a slow client slows the export rather than filling memory. When the
client leaves or the daemon stops, the handler ends and the thread stops at its next piece.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from ctxscope.inspector.share.exchanges import exported_call
from ctxscope.inspector.share.har_writer import write_har
from ctxscope.inspector.store.analysis_rows import call_ids
from ctxscope.inspector.store.queries import open_db
from ctxscope.vocab.heap import release_heap
from ctxscope.web import security

log = logging.getLogger("ctxscope.web")
QUEUED = 4  # pieces (each at most a body chunk, JSON-escaped) between the thread and the socket
RUNNING = 2  # exports at once; more get a 503
_END = b""


class _Stopped(Exception):
    """The client left or the daemon stops: the export thread ends."""


class _LoopSink:
    """A binary file for ``write_har`` whose writes go into the loop's queue, waiting while it is full."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | str], stop: threading.Event):
        self.loop, self.queue, self.stop = loop, queue, stop

    def write(self, data: bytes) -> int:
        if data:
            self.put(bytes(data))
        return len(data)

    def put(self, data: bytes | str) -> None:
        """A piece for the socket (bytes), the end (``_END``), or why the export failed (str)."""
        if self.stop.is_set():
            raise _Stopped
        try:
            future = asyncio.run_coroutine_threadsafe(self.queue.put(data), self.loop)
        except RuntimeError:  # the loop is closed
            raise _Stopped from None
        while True:
            try:
                future.result(timeout=0.5)
                return
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    future.cancel()
                    raise _Stopped from None


def _export(db_path: Path, segment_texts: object, session: str, version: str, daemon_url: str, sink: _LoopSink) -> None:
    db = open_db(db_path, segment_texts=segment_texts)  # type: ignore[arg-type]
    try:
        calls = (exported_call(db, call_id) for call_id in call_ids(db, session))
        for _ in write_har(sink, calls, version, daemon_url):  # type: ignore[arg-type]
            release_heap()  # a call's buffers back to the system, not kept by a fragmented heap
        sink.put(_END)
    except _Stopped:
        pass
    except (sqlite3.Error, KeyError, OSError) as exc:  # the store failed mid-way: say it in one line
        with contextlib.suppress(_Stopped):
            sink.put(f"{type(exc).__name__}: {exc}")
    finally:
        db.close()


class HarExports:
    """The daemon's streamed HAR downloads, at most ``RUNNING`` at once."""

    def __init__(self, db_path: Path, segment_texts: object, version: str):
        self.db_path, self.segment_texts, self.version = db_path, segment_texts, version
        self.running = 0

    async def stream(self, request: web.Request, session: str, daemon_url: str, name: str) -> web.StreamResponse:
        """Send ``session``'s HAR (a full session id) as ``name``; the caller checked it exists."""
        if self.running >= RUNNING:
            raise web.HTTPServiceUnavailable(text=f"{RUNNING} exports are running: try again when one is done")
        self.running += 1
        stop = threading.Event()
        queue: asyncio.Queue[bytes | str] = asyncio.Queue(QUEUED)
        sink = _LoopSink(asyncio.get_running_loop(), queue, stop)
        work: Callable[[], None] = lambda: _export(  # noqa: E731
            self.db_path, self.segment_texts, session, self.version, daemon_url, sink
        )
        thread = threading.Thread(target=work, name="ctxscope-har-export", daemon=True)
        try:
            resp = web.StreamResponse(
                headers={
                    "Content-Type": "application/json",
                    "Content-Disposition": f'attachment; filename="{name}.har"',
                    "Cache-Control": "no-store",
                }
            )
            security.apply_headers(resp)  # before the stream starts
            await resp.prepare(request)
            thread.start()
            while (piece := await queue.get()) != _END:
                if isinstance(piece, str):  # no end: the client sees a cut download, not a short HAR
                    log.warning("the HAR export of session %s stopped: %s", session, piece)
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                await resp.write(piece)
            await resp.write_eof()
            return resp
        finally:
            stop.set()
            self.running -= 1
