"""Live updates: one poller per daemon, fanned out to every open page as Server-Sent Events.

The poller wakes every ``interval`` seconds while at least one page listens, asks the store for
calls with a rowid above the last one it saw (an indexed lookup, in a worker thread) and reads the
writer's live counters; news goes to each subscriber's queue. Pages get ``calls`` events (summary
rows of the new calls) and ``status`` events (store failures). On daemon shutdown every stream
ends at once so ``runner.cleanup()`` does not wait for open pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import sqlite_utils
from aiohttp import web

from ctxscope.inspector.store.views import calls_after, max_rowid
from ctxscope.proxy.redaction.mask import mask_keys_in
from ctxscope.web.pool import ReadPool

log = logging.getLogger("ctxscope.web")

HEARTBEAT_S = 15.0
MAX_ROWS_PER_EVENT = 200
_CLOSE = object()


# What a new call's event carries: the page's columns, and what `ctxscope tail` prints per call
# (its relation, verdict, tokens, lost dollars, latency: the analysis is in the row it reads).
BRIEF = (
    "id",
    "session",
    "seq",
    "model",
    "started_at",
    "outcome",
    "status",
    "api",
    "thread",
    "relation",
    "pointer",
    "cache_verdict",
    "duration_ms",
    "usage_input",
    "usage_output",
    "usage_cache_read",
    "usage_cache_write",
)


def _brief(row: dict) -> dict:
    out = {k: row.get(k) for k in BRIEF}
    try:
        cache = json.loads(row.get("cache") or "null")
    except ValueError:
        cache = None
    out["lost_usd"] = cache.get("lost_cost_usd") if isinstance(cache, dict) else None
    out["lost_tokens"] = cache.get("lost_tokens") if isinstance(cache, dict) else None
    return out


def _new_calls(db: sqlite_utils.Database, after: int) -> tuple[int, list[dict]]:
    out = calls_after(db, after, MAX_ROWS_PER_EVENT)
    last = out[-1]["rowid"] if out else after
    return last, mask_keys_in([_brief(r) for r in out])  # the model name is the client's text


class LiveHub:
    """Subscribers (one asyncio.Queue per open page) and the poller task that feeds them."""

    def __init__(self, pool: ReadPool, status: Callable[[], dict | None], interval: float = 0.3):
        self.pool, self.status, self.interval = pool, status, interval  # status: the writer's, for the pages
        self._subscribers: set[asyncio.Queue] = set()
        self._task: asyncio.Task | None = None
        self._last_rowid: int | None = None
        self._last_status: str | None = None

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=100)
        self._subscribers.add(q)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="ctxscope-web-live")
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    def _publish(self, event: str, data: Any) -> None:
        for q in list(self._subscribers):
            try:
                q.put_nowait((event, data))
            except asyncio.QueueFull:  # a stalled page: tell it to reload rather than queue forever
                with contextlib.suppress(asyncio.QueueEmpty):
                    while True:
                        q.get_nowait()
                q.put_nowait(("resync", {}))

    async def _poll(self) -> None:
        store_error = None
        while self._subscribers:
            try:
                if self._last_rowid is None:
                    self._last_rowid = await self.pool.run(max_rowid)
                else:
                    last, rows = await self.pool.run(_new_calls, self._last_rowid)
                    if last < self._last_rowid:  # calls deleted below us: start again from the top
                        self._last_rowid = await self.pool.run(max_rowid)
                    elif rows:
                        self._last_rowid = last
                        self._publish("calls", rows)
                store_error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store is unreadable: keep serving pages and the writer's status
                if store_error is None:
                    log.warning("live poller: %s", e)
                store_error = str(e)
            status = self.status()
            text = json.dumps(status, sort_keys=True, default=str)
            if text != self._last_status:
                self._last_status = text
                self._publish("status", status)
            await asyncio.sleep(self.interval)
        self._last_rowid = None  # nobody listened for a while: the next page starts from now

    async def close(self) -> None:
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(_CLOSE)
        self._subscribers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def stream(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        """Serve one page's event stream until it goes away or the daemon stops."""
        q = self.subscribe()
        try:
            if self._last_rowid is None:  # the baseline exists before the page hears anything
                with contextlib.suppress(Exception):  # (an unreadable store: the poller sets it later)
                    self._last_rowid = await self.pool.run(max_rowid)
            await response.prepare(request)
            await response.write(b"retry: 1000\n\n")
            self._last_status = None  # the new page needs the current status once
            while True:
                try:
                    item = await asyncio.wait_for(q.get(), HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if item is _CLOSE:
                    break
                event, data = item
                payload = json.dumps(data, separators=(",", ":"), default=str)
                await response.write(f"event: {event}\ndata: {payload}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.unsubscribe(q)
        return response
