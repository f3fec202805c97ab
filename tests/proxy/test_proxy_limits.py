"""The proxy's abuse limits, attacked the way a hostile client would: raw sockets that send a
request head or body a byte at a time, idle keep-alive connections, more connections than allowed,
bodies over the limit, malformed requests. Limits are small here (half a second) so tests are fast;
the assertions leave generous room for a loaded machine."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from ctxscope.proxy.defence.limits import BODY_PROGRESS, Limits
from ctxscope.proxy.server import make_runner
from ctxscope.vocab.kinds import Outcome

from support.proxy_rig import closed_within, event_loop_policy, on_the_chosen_loop, serve_app, start_proxy, trickle

FAST = Limits(header_timeout=0.5, body_timeout=0.5, keepalive_timeout=30)
HEAD = b"POST /u/up/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


class Echo:
    """An upstream that answers every request with the size of its body."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(body)
        return web.json_response(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": f"got {len(body)}"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        )


pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy" fixture:DeprecationWarning')
assert event_loop_policy and on_the_chosen_loop  # fixtures: every test here runs on asyncio and on uvloop


@pytest.fixture
async def echo():
    upstream = Echo()
    app = web.Application(client_max_size=2**30)
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    runner, url = await serve_app(app)
    upstream.url = url
    yield upstream
    await runner.cleanup()


@pytest.fixture
async def proxy(echo, request):
    p = await start_proxy({"up": echo.url, "anthropic": echo.url, "openai": echo.url}, getattr(request, "param", FAST))
    yield p
    await p.stop()


async def test_a_request_head_sent_a_byte_at_a_time_is_closed_after_the_header_timeout(proxy, echo):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    sender = asyncio.ensure_future(trickle(writer, HEAD + b"X-Slow: " + b"a" * 500, every=0.05, until=20))
    await closed_within(reader, 5)
    sent = await sender
    writer.close()
    assert sent < 200  # it kept sending (progress) and was closed anyway: the head has one deadline
    assert proxy.server.counts["header_timeouts"] == 1
    assert echo.bodies == [] and proxy.sink.items == []


async def test_a_silent_new_connection_is_closed_after_the_header_timeout(proxy):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await closed_within(reader, 5) == b""
    writer.close()
    assert proxy.server.counts["idle_closed"] == 1 and proxy.server.counts["header_timeouts"] == 0


async def test_a_body_trickling_in_is_cut_after_the_body_timeout_and_recorded(proxy, echo):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(HEAD + b"Content-Length: 1000000\r\n\r\n")
    sender = asyncio.ensure_future(trickle(writer, b"{" + b" " * 999999, every=0.02, until=20))
    await closed_within(reader, 5)
    await sender
    writer.close()
    [e] = await proxy.sink.wait(1)
    assert e.outcome == Outcome.CLIENT_DISCONNECTED and "stalled" in e.error and "not forwarded" in e.error
    assert e.request_body == b"" and echo.bodies == []
    assert proxy.server.counts["body_stalls"] == 1


async def test_a_slow_but_steady_body_is_not_cut(proxy, echo):
    body = json.dumps({"x": "y" * (12 * BODY_PROGRESS)}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(HEAD + b"Content-Length: %d\r\n\r\n" % len(body))
    step = 2 * BODY_PROGRESS
    for i in range(0, len(body), step):  # 2x the progress the limit wants, every 0.1 s of a 0.5 s window
        writer.write(body[i : i + step])
        await writer.drain()
        await asyncio.sleep(0.1)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert echo.bodies == [body]


async def _answer(reader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(
        next(v for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")) if k.lower() == b"content-length")
    )
    await reader.readexactly(length)
    return head


@pytest.mark.parametrize("proxy", [Limits(body_timeout=1.0)], indirect=True)
async def test_each_body_on_a_keep_alive_connection_gets_a_whole_window(proxy, echo):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(HEAD + b"Content-Length: 2\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"{}")  # a body after its head: the body clock starts
    assert (await _answer(reader)).startswith(b"HTTP/1.1 200")
    await asyncio.sleep(0.7)  # most of a window later, the next request's body takes half a window
    writer.write(HEAD + b"Content-Length: 4\r\n\r\n{ ")
    await writer.drain()
    await asyncio.sleep(0.5)
    writer.write(b" }")
    assert (await _answer(reader)).startswith(b"HTTP/1.1 200")
    writer.close()
    assert echo.bodies == [b"{}", b"{  }"]


@pytest.mark.parametrize("proxy", [Limits(keepalive_timeout=0.5)], indirect=True)
async def test_an_idle_keep_alive_connection_is_closed_after_the_keepalive_timeout(proxy):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(HEAD + b"Content-Length: 2\r\n\r\n{}")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200") and b"keep-alive" not in head.lower().replace(b"connection: close", b"")
    length = int(
        next(v for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")) if k.lower() == b"content-length")
    )
    await reader.readexactly(length)
    await closed_within(reader, 5)  # idle: closed by the keep-alive timeout, not left for an hour
    writer.close()


async def test_default_limits_reach_aiohttp_and_the_idle_timeout_is_75_seconds():
    from ctxscope.proxy.forward.forwarder import Forwarder, ProxySettings
    from ctxscope.proxy.server import create_proxy_app

    runner = make_runner(create_proxy_app(Forwarder(ProxySettings(upstreams={}, salt=b"s"), None)))
    await runner.setup()
    try:
        handler = runner.server()
        assert handler.keepalive_timeout == 75  # aiohttp's own default is 3630 s
        assert runner.server.limits == Limits() and Limits().max_connections == 512
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("proxy", [Limits(max_connections=3)], indirect=True)
async def test_connections_over_the_cap_get_a_provider_shaped_503_and_are_closed(proxy, echo):
    held = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(3)]
    await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    answer = await closed_within(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 503") and b"Connection: close" in answer
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["type"] == "overloaded_error" and error["code"] == "too_many_connections"
    assert proxy.server.open_connections == 3 and proxy.server.counts["refused"] == 1

    # the SDKs read it as their usual error ...
    client = anthropic.AsyncAnthropic(api_key="sk-ant-x", base_url=proxy.base + "/anthropic", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 503 and "too many connections" in str(info.value)
    # ... and once the held connections go, calls go through again
    for _, w in held:
        w.close()
    await asyncio.sleep(0.2)
    reply = await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert reply.content[0].text.startswith("got ")
    await client.close()


@pytest.mark.parametrize("proxy", [Limits(max_body_bytes=2**20)], indirect=True)
async def test_a_body_over_the_limit_gets_a_provider_shaped_413_and_is_recorded(proxy, echo):
    big = "x" * (2 * 2**20)
    aclient = anthropic.AsyncAnthropic(api_key="sk-ant-x", base_url=proxy.base + "/anthropic", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        await aclient.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": big}])
    assert info.value.status_code == 413 and info.value.body["error"]["type"] == "request_too_large"
    oclient = openai.AsyncOpenAI(api_key="sk-x", base_url=proxy.base + "/openai/v1", max_retries=0)
    with pytest.raises(openai.APIStatusError) as oinfo:
        await oclient.chat.completions.create(model="m", messages=[{"role": "user", "content": big}])
    assert oinfo.value.status_code == 413 and oinfo.value.code == "request_too_large"

    async def chunks():  # no Content-Length: the limit is found while reading
        for _ in range(40):
            yield b"y" * 65536

    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.base + "/u/up/v1/chat/completions", data=chunks()) as resp,
    ):
        assert resp.status == 413 and resp.headers["Content-Type"] == "application/json"
        assert (await resp.json())["error"]["code"] == "request_too_large"
    items = await proxy.sink.wait(3)
    assert [e.outcome for e in items] == [Outcome.REQUEST_TOO_LARGE] * 3
    assert all(e.request_body == b"" and str(2**20) in e.error for e in items)
    assert "Content-Length" in items[0].error
    assert echo.bodies == []
    # a body at the limit still goes through
    reply = await aclient.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "ok"}])
    assert reply.content[0].text.startswith("got ")
    await aclient.close()
    await oclient.close()


async def test_a_client_leaving_mid_body_is_recorded_without_a_traceback(proxy, echo, caplog):
    with caplog.at_level(logging.DEBUG):
        _reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(HEAD + b"Content-Length: 1000\r\n\r\n" + b"{" * 500)
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        [e] = await proxy.sink.wait(1)
    assert e.outcome == Outcome.CLIENT_DISCONNECTED and "mid-request" in e.error and "500" in e.error
    assert echo.bodies == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "attack",
    [
        HEAD + b"X-Huge: " + b"a" * 20000 + b"\r\n\r\n",  # a header line over aiohttp's 8190 bytes
        HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",  # bad chunk size
        HEAD + b"Content-Length: 5\r\nContent-Length: 7\r\n\r\nhello",  # conflicting lengths
        b"GET /u/up/v1 HTTP/1.1\r\nHost: a\r\n\x00bad\r\n\r\n",  # garbage in the head
    ],
)
async def test_a_malformed_request_is_refused_with_one_log_line_and_no_traceback(proxy, echo, caplog, attack):
    with caplog.at_level(logging.DEBUG):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(attack)
        answer = await closed_within(reader, 5)
        writer.close()
        await asyncio.sleep(0.05)
    assert answer.split(b" ", 2)[1] == b"400"
    assert echo.bodies == []
    logged = [r for r in caplog.records if r.name.startswith("aiohttp") or r.name.startswith("ctxscope")]
    assert not [r for r in logged if r.exc_info or r.levelno >= logging.ERROR], [r.getMessage() for r in logged]
    lines = [r.getMessage() for r in logged if r.levelno >= logging.INFO]
    assert len(lines) == 1 and "\n" not in lines[0], lines


async def test_a_chunked_body_that_turns_malformed_midway_is_refused_without_a_traceback(proxy, echo, caplog):
    with caplog.at_level(logging.DEBUG):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is reading the body by now
        writer.write(b"zz\r\nbad\r\n0\r\n\r\n")
        answer = await closed_within(reader, 5)
        writer.close()
        await asyncio.sleep(0.05)
    assert answer.split(b" ", 2)[1] == b"400"
    assert echo.bodies == []
    logged = [r for r in caplog.records if r.name.startswith(("aiohttp", "ctxscope"))]
    assert not [r for r in logged if r.exc_info or r.levelno >= logging.ERROR], [r.getMessage() for r in logged]
    lines = [r.getMessage() for r in logged if r.levelno >= logging.INFO]
    assert len(lines) == 1 and "malformed request body" in lines[0], lines


async def test_a_pipelined_body_after_a_body_that_ended_in_the_same_packet_still_has_a_deadline(proxy, echo):
    """The packet that ends one request's body carries the next request's head and the start of
    its body: that body trickles in too slowly and must be cut like any other."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(HEAD + b"Content-Length: 2\r\n\r\n{")
    await writer.drain()
    await asyncio.sleep(0.1)  # the first body is being read
    writer.write(b"}" + HEAD + b"Content-Length: 1000000\r\n\r\n{")
    sender = asyncio.ensure_future(trickle(writer, b" " * 999999, every=0.02, until=20))
    answer = await closed_within(reader, 5)
    await sender
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1 ") == 1
    first, second = await proxy.sink.wait(2)
    assert first.outcome == Outcome.OK and echo.bodies == [b"{}"]
    assert second.outcome == Outcome.CLIENT_DISCONNECTED and "stalled" in second.error
    assert proxy.server.counts["body_stalls"] == 1
