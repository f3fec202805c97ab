"""The HTTP client the forwarder talks to upstreams with, and how it tells a reset from a clean end.

A response body with neither Content-Length nor chunked framing ends when the upstream closes the
connection. aiohttp ends such a body cleanly whether the close was a FIN or a reset (RST), so a
stream cut by a crash or a hostile network looked complete. The client's connections therefore
use a protocol that fails an unfinished body when the connection breaks with an error, which the
forwarder records as ``upstream_reset``.

The same protocol keeps the read timeout (``sock_read``: the longest silence between two reads)
with one timer per silence instead of one per read. aiohttp cancels its timer and arms a new one on
every read, which for a 200-chunk stream is 400 timer operations on the event loop; here a read
only notes the time, and the timer, when it fires, arms itself again for the rest of the silence
if data came meanwhile. The end of an answer does not cancel it either: it stays armed for the
connection's next request, and fires idle at most once per ``read_timeout`` (docs/architecture.md,
"The upstream read timeout is one timer per silence").
"""

from __future__ import annotations

import asyncio
import functools

import aiohttp
from aiohttp.client_proto import ResponseHandler


class _UpstreamProtocol(ResponseHandler):
    """aiohttp's client protocol; a connection lost with an error fails the body being read, and the
    read timeout is one timer per silence (see the module docstring)."""

    _last_read = 0.0
    _timing = False  # the silence counts: a request was sent, its answer is not all read

    def _reschedule_timeout(self) -> None:
        """What aiohttp calls on every read (and when a request was sent): the silence starts now."""
        timeout = self._read_timeout
        if not timeout:
            self._timing = False
            return
        self._timing = True
        self._last_read = now = self._loop.time()
        if self._read_timeout_handle is None:
            self._read_timeout_handle = self._loop.call_at(now + timeout, self._silence_over)

    def _drop_timeout(self) -> None:
        """What aiohttp calls when the silence stops counting (the answer is complete, reading is
        paused...): the timer stays armed for the connection's next request, and does nothing if it
        fires before one. Only the end of the connection cancels it (``_stop_timer``)."""
        self._timing = False

    def _stop_timer(self) -> None:
        self._timing = False
        handle, self._read_timeout_handle = self._read_timeout_handle, None
        if handle is not None:
            handle.cancel()

    def _silence_over(self) -> None:
        """The timer: a timeout if nothing was read since, else armed again for the rest of the silence."""
        self._read_timeout_handle = None
        timeout = self._read_timeout
        if not timeout or not self._timing:
            return
        due = self._last_read + timeout
        if self._loop.time() < due:
            self._read_timeout_handle = self._loop.call_at(due, self._silence_over)
            return
        self._on_read_timeout()

    def close(self) -> None:
        super().close()
        self._stop_timer()

    def abort(self) -> None:
        super().abort()
        self._stop_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        payload = self._payload
        if exc is not None and payload is not None and not payload.is_eof():
            payload.set_exception(aiohttp.ClientPayloadError(f"upstream connection broke mid-body: {exc!r}"))
        super().connection_lost(exc)
        self._stop_timer()


def _protocol(loop: asyncio.AbstractEventLoop) -> ResponseHandler:
    """One upstream connection's protocol: aiohttp's, telling a reset from a clean end."""
    return _UpstreamProtocol(loop=loop)


def new_session(connect_timeout: float, read_timeout: float) -> aiohttp.ClientSession:
    """A session that passes bytes through untouched: no decompression, cookies or env proxies
    (the forwarder looks proxies up itself, once per upstream)."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    if hasattr(connector, "_factory"):  # how aiohttp makes each connection's protocol
        connector._factory = functools.partial(_protocol, loop=asyncio.get_running_loop())
    return aiohttp.ClientSession(
        auto_decompress=False,
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
