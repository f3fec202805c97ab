"""Honest outcomes: a client that leaves is recorded as such and stops the upstream call; a cut
stream is never ``ok``; a reset before the answer is a reset, not an unreachable upstream; the
daemon's own shutdown is ``interrupted``. Upstreams here are real servers on loopback, some raw
asyncio sockets that reset their connection (SO_LINGER 0) where aiohttp would close cleanly."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import aiohttp
import anthropic
import pytest
from aiohttp import web

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.defence.limits import Limits
from ctxscope.vocab.kinds import Outcome

from support.proxy_rig import event_loop_policy, on_the_chosen_loop, read_request, reset_socket, serve_app, start_proxy


class Silent:
    """An upstream that thinks for ever (or streams a first event and then thinks for ever), and
    notes when the proxy closes the connection it was answering on."""

    def __init__(self):
        self.started = asyncio.Event()
        self.gone_at: float | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.started.set()
        try:
            if request.path.endswith("/stream"):
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(b"event: ping\ndata: {}\n\n")
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # aiohttp cancels the handler when its client (the proxy) leaves
            self.gone_at = time.monotonic()
            raise
        return web.Response()


pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy" fixture:DeprecationWarning')
assert event_loop_policy and on_the_chosen_loop  # fixtures: every test here runs on asyncio and on uvloop


@pytest.fixture
async def silent():
    upstream = Silent()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    runner, url = await serve_app(app, handler_cancellation=True)
    upstream.url = url
    yield upstream
    await runner.cleanup()


async def _gone_within(upstream: Silent, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while upstream.gone_at is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert upstream.gone_at is not None, "the upstream request was left open"
    return upstream.gone_at


async def test_a_client_leaving_a_thinking_upstream_cancels_it_at_once(silent, caplog):
    proxy = await start_proxy({"anthropic": silent.url})
    try:
        client = anthropic.AsyncAnthropic(
            api_key="sk-ant-x", base_url=proxy.base + "/anthropic", max_retries=0, timeout=0.5
        )
        with pytest.raises(anthropic.APITimeoutError):  # the SDK gives up and closes its connection
            await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "think"}])
        await client.close()
        left = time.monotonic()
        gone = await _gone_within(silent, 5)
        [e] = await proxy.sink.wait(1)
    finally:
        await proxy.stop()
    assert gone - left < 1.0  # "at once": the time it takes the close to cross loopback, with room
    assert e.outcome == Outcome.CLIENT_DISCONNECTED and "cancelled" in e.error and e.status is None
    assert e.request_body and e.response_body == b""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_a_client_leaving_a_stream_while_the_upstream_thinks_cancels_it(silent, caplog):
    proxy = await start_proxy({"up": silent.url})
    try:
        async with aiohttp.ClientSession() as s:
            resp = await s.post(proxy.base + "/u/up/v1/stream", data=b"{}")
            assert await resp.content.readany() == b"event: ping\ndata: {}\n\n"
            resp.close()
        left = time.monotonic()
        gone = await _gone_within(silent, 5)
        [e] = await proxy.sink.wait(1)
    finally:
        await proxy.stop()
    assert gone - left < 1.0
    assert e.outcome == Outcome.CLIENT_DISCONNECTED and e.status == 200 and "mid-response" in e.error
    assert e.response_body == b"event: ping\ndata: {}\n\n"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_a_client_leaving_before_the_request_is_forwarded_is_recorded_and_not_forwarded(silent):
    proxy = await start_proxy({"up": silent.url})
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"POST /u/up/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        writer.close()
        [e] = await proxy.sink.wait(1)
    finally:
        await proxy.stop()
    assert e.outcome == Outcome.CLIENT_DISCONNECTED


class RawUpstream:
    """A raw asyncio server: reads one request, then does what ``script`` says."""

    def __init__(self, script):
        self.script = script
        self.server: asyncio.AbstractServer | None = None

    async def _serve(self, reader, writer):
        try:
            await read_request(reader)
            await self.script(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()


CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


async def _through_proxy(upstream_url: str) -> tuple[int | None, bytes, BaseException | None, ex.Exchange]:
    proxy = await start_proxy({"up": upstream_url})
    status, got, error = None, b"", None
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.base + "/u/up/v1/chat/completions", data=b"{}") as resp,
        ):
            status = resp.status
            try:
                async for chunk in resp.content.iter_any():
                    got += chunk
            except aiohttp.ClientPayloadError as exc:
                error = exc
        [e] = await proxy.sink.wait(1)
    finally:
        await proxy.stop()
    return status, got, error, e


async def test_a_reset_ending_a_close_delimited_body_is_upstream_reset_and_the_client_sees_the_cut():
    async def script(writer):
        writer.write(CLOSE_DELIMITED + b"data: 1\n\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"data: 2\n\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        reset_socket(writer)

    async with RawUpstream(script) as up:
        status, got, error, e = await _through_proxy(up.url)
    assert status == 200 and got == b"data: 1\n\ndata: 2\n\n"
    assert isinstance(error, aiohttp.ClientPayloadError)  # truncated for the client too, not a clean end
    assert e.outcome == Outcome.UPSTREAM_RESET and e.response_body == got and "broke" in e.error


async def test_a_clean_close_ending_a_close_delimited_body_is_ok():
    async def script(writer):
        writer.write(CLOSE_DELIMITED + b"data: 1\n\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"data: 2\n\n")
        await writer.drain()
        writer.close()

    async with RawUpstream(script) as up:
        status, got, error, e = await _through_proxy(up.url)
    assert status == 200 and got == b"data: 1\n\ndata: 2\n\n" and error is None
    assert e.outcome == Outcome.OK


async def test_a_reset_before_the_response_head_is_upstream_reset_with_a_provider_shaped_502():
    async def script(writer):
        await asyncio.sleep(0.1)
        reset_socket(writer)

    async with RawUpstream(script) as up:
        proxy = await start_proxy({"anthropic": up.url})
        try:
            client = anthropic.AsyncAnthropic(api_key="sk-ant-x", base_url=proxy.base + "/anthropic", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
            await client.close()
            [e] = await proxy.sink.wait(1)
        finally:
            await proxy.stop()
    assert info.value.status_code == 502 and "connection lost" in str(info.value)
    assert e.outcome == Outcome.UPSTREAM_RESET


async def _unreachable_call(proxy):
    """Post one call through the proxy; the client must get the proxy's own 502; the recorded call."""
    async with aiohttp.ClientSession() as s, s.post(proxy.base + "/u/up/v1/chat/completions", data=b"{}") as resp:
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_unreachable"
    [e] = await proxy.sink.wait(1)
    return e


async def test_a_connect_failure_stays_upstream_unreachable():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    proxy = await start_proxy({"up": f"http://127.0.0.1:{port}"})
    try:
        e = await _unreachable_call(proxy)
    finally:
        await proxy.stop()
    assert e.outcome == Outcome.UPSTREAM_UNREACHABLE


async def test_the_daemons_shutdown_cutting_a_never_ending_stream_is_interrupted():
    async def forever(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while True:
            await resp.write(b"data: more\n\n")
            await asyncio.sleep(0.05)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forever)
    up_runner, up_url = await serve_app(app)
    proxy = await start_proxy({"up": up_url}, Limits(shutdown_grace=0.3))
    try:
        async with aiohttp.ClientSession() as s, s.post(proxy.base + "/u/up/v1/stream", data=b"{}") as resp:
            assert await resp.content.readany()
            stopping = asyncio.ensure_future(proxy.stop())
            with pytest.raises(aiohttp.ClientPayloadError):  # a cut, not a clean end
                async for _ in resp.content.iter_any():
                    pass
        await asyncio.wait_for(stopping, 10)
        [e] = await proxy.sink.wait(1)
    finally:
        await up_runner.cleanup()
    assert e.outcome == Outcome.INTERRUPTED and e.status == 200 and e.response_body.startswith(b"data: more")


async def test_the_daemons_shutdown_while_the_upstream_thinks_is_interrupted(silent):
    proxy = await start_proxy({"up": silent.url}, Limits(shutdown_grace=0.3))
    async with aiohttp.ClientSession() as s:
        call = asyncio.ensure_future(s.post(proxy.base + "/u/up/v1/think", data=b"{}"))
        await asyncio.wait_for(silent.started.wait(), 10)
        await asyncio.wait_for(proxy.stop(), 10)
        with pytest.raises(aiohttp.ClientError):
            await call
    [e] = await proxy.sink.wait(1)
    assert e.outcome == Outcome.INTERRUPTED and e.status is None
    await _gone_within(silent, 5)


async def test_a_connect_that_times_out_is_upstream_unreachable_not_a_timeout():
    """A timeout while connecting means no connection was ever made; ``timeout`` is for an
    upstream that was reached and then fell silent."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))  # the accept queue is full: new SYNs are dropped
    proxy = await start_proxy({"up": f"http://127.0.0.1:{port}"}, connect_timeout=0.3)
    try:
        e = await _unreachable_call(proxy)
    finally:
        await proxy.stop()
        filler.close()
        listener.close()
    assert e.outcome == Outcome.UPSTREAM_UNREACHABLE and "connect" in e.error and e.status is None


async def test_a_malformed_response_head_is_upstream_reset_not_unreachable():
    """The upstream was reached and answered something that is not HTTP: the connection broke
    before a response, which is not "no connection"."""

    async def script(writer):
        writer.write(b"NOT-HTTP garbage\r\n\r\n")
        await writer.drain()
        writer.close()

    async with RawUpstream(script) as up:
        proxy = await start_proxy({"up": up.url})
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.post(proxy.base + "/u/up/v1/chat/completions", data=b"{}") as resp,
            ):
                assert resp.status == 502
                error = (await resp.json())["error"]
            [e] = await proxy.sink.wait(1)
        finally:
            await proxy.stop()
    assert error["code"] == "upstream_reset" and "malformed" in error["message"]
    assert e.outcome == Outcome.UPSTREAM_RESET and e.status is None and "malformed" in e.error


async def test_a_client_leaving_while_the_daemon_stops_is_client_disconnected_and_cancels_at_once(silent):
    """Stopping waits shutdown_grace for open calls; a client that leaves meanwhile still stops
    its upstream call at once, and its call is recorded as the client's leaving, not as cut by
    the shutdown."""
    proxy = await start_proxy({"up": silent.url}, Limits(shutdown_grace=10))
    _reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"POST /u/up/v1/think HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
    await asyncio.wait_for(silent.started.wait(), 10)
    stopping = asyncio.ensure_future(proxy.stop())
    await asyncio.sleep(0.2)  # the daemon is stopping, waiting for the open call
    writer.close()
    left = time.monotonic()
    gone = await _gone_within(silent, 5)
    await asyncio.wait_for(stopping, 15)
    [e] = await proxy.sink.wait(1)
    assert gone - left < 3.0  # well before the 10 s grace ends
    assert e.outcome == Outcome.CLIENT_DISCONNECTED and e.status is None
