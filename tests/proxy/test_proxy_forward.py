"""The forwarding path against a real upstream on loopback: bytes, compression, faults."""

from __future__ import annotations

import asyncio
import gzip
import json
import time

import aiohttp
import pytest
import yarl
from aiohttp import web

from ctxscope.proxy.forward.forwarder import Forwarder, ProxySettings
from ctxscope.proxy.server import create_proxy_app, make_runner
from ctxscope.vocab.kinds import Outcome

from support.proxy_rig import ListSink


class Upstream:
    """A raw upstream that records exactly what it received and what it sent."""

    def __init__(self):
        self.received: list[tuple[dict, bytes]] = []
        self.paths: list[str] = []
        self.sent: list[bytes] = []
        self.mode = "json"
        self.release = asyncio.Event()

    async def handle(self, request: web.Request):
        body = await request.read()
        self.received.append((dict(request.headers), body))
        self.paths.append(request.raw_path)
        if self.mode == "late_body":  # a Content-Length body whose second half waits for the test
            parts = (b'{"first": "half", ', b'"x": 1}')
            resp = web.StreamResponse(
                headers={"Content-Type": "application/json", "Content-Length": str(sum(map(len, parts)))}
            )
            await resp.prepare(request)
            for part in parts:
                self.sent.append(part)
                await resp.write(part)
                if len(self.sent) == 1:
                    await self.release.wait()
            await resp.write_eof()
            return resp
        if self.mode in ("stall_head", "stall_mid"):  # silent until the test lets go
            if self.mode == "stall_head":
                await self.release.wait()
                return web.Response(body=b"{}")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            self.sent.append(b"data: 1\n\n")
            await resp.write(self.sent[-1])
            await self.release.wait()
            return resp
        if self.mode == "slow_ok":  # pauses shorter than the read timeout, more than it in total
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(6):
                self.sent.append(f"data: {i}\n\n".encode())
                await resp.write(self.sent[-1])
                await asyncio.sleep(0.1)
            await resp.write_eof()
            return resp
        if self.mode == "slow_then_silent":  # pauses shorter than the read timeout, then silent until let go
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(6):
                self.sent.append(f"data: {i}\n\n".encode())
                await resp.write(self.sent[-1])
                await asyncio.sleep(0.1)
            await self.release.wait()
            return resp
        if self.mode == "headers_then_wait":  # headers alone, the body only when the test lets go
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await self.release.wait()
            self.sent.append(b"data: late\n\n")
            await resp.write(self.sent[-1])
            await resp.write_eof()
            return resp
        if self.mode == "no_content":
            return web.Response(status=204, headers={"X-Seen": "yes"})
        if self.mode == "stream":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(20):
                chunk = f'event: x\ndata: {{"i": {i}}}\n\n'.encode()
                self.sent.append(chunk)
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        if self.mode == "reset":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            chunk = b'data: {"partial": true}\n\n'
            self.sent.append(chunk)
            await resp.write(chunk)
            await asyncio.sleep(0.05)
            request.transport.abort()
            return resp
        if self.mode == "gzip":
            payload = gzip.compress(b'{"ok": true}')
            self.sent.append(payload)
            return web.Response(body=payload, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        if self.mode == "slow_stream":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(200):
                await resp.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(0.02)
            return resp
        payload = json.dumps({"echo_len": len(body)}).encode()
        self.sent.append(payload)
        return web.Response(body=payload, content_type="application/json")


async def _serve(app, **runner_kwargs):
    runner = web.AppRunner(app, **runner_kwargs)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def rig(request):
    upstream = Upstream()
    app = web.Application(client_max_size=300 * 2**20)
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    up_runner, up_url = await _serve(app, auto_decompress=False)
    sink = ListSink()
    settings = ProxySettings(upstreams={"up": up_url, "dead": "http://127.0.0.1:9"}, salt=b"s" * 32)
    settings.read_timeout = getattr(request, "param", settings.read_timeout)
    forwarder = Forwarder(settings, sink)
    proxy_app = create_proxy_app(forwarder)
    runner = make_runner(proxy_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]

    class Rig:
        pass

    r = Rig()
    r.upstream, r.sink, r.base = upstream, sink, f"http://127.0.0.1:{port}"
    yield r
    upstream.release.set()  # let a stalled upstream handler finish
    await runner.cleanup()
    await up_runner.cleanup()


async def _wait_for(sink, n=1):
    for _ in range(200):
        if len(sink.items) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {n} captured exchanges, got {len(sink.items)}")


async def test_stream_bytes_identical_and_recorded(rig):
    rig.upstream.mode = "stream"
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(
            rig.base + "/s/demo/u/up/v1/x?a=1",
            data=b'{"stream": true}',
            headers={"x-api-key": "sk-ant-secret-123456789", "x-ctxscope-turn": "3"},
        ) as resp,
    ):
        got = await resp.read()
    assert got == b"".join(rig.upstream.sent)
    headers, body = rig.upstream.received[0]
    assert body == b'{"stream": true}'
    assert not any(k.lower().startswith("x-ctxscope") for k in headers)
    assert headers["x-api-key"] == "sk-ant-secret-123456789"  # forwarded as is
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.response_body == got and e.outcome == Outcome.OK and e.status == 200
    assert e.session_label == "demo" and e.path == "/v1/x" and e.query == "a=1"
    assert ("x-ctxscope-turn", "3") in e.annotations
    assert "sk-ant-secret" not in repr(e.request_headers)
    assert e.key_fingerprint and len(e.key_fingerprint) == 16
    assert e.first_byte_at is not None and e.started_at <= e.first_byte_at <= e.ended_at


async def test_compressed_request_and_response_pass_through(rig):
    rig.upstream.mode = "gzip"
    raw = gzip.compress(b'{"model": "m", "messages": []}')
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(
            rig.base + "/u/up/v1/chat/completions",
            data=raw,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        ) as resp,
    ):
        got = await resp.read()
        assert resp.headers["Content-Encoding"] == "gzip"
    assert rig.upstream.received[0][1] == raw
    assert got == rig.upstream.sent[0]
    await _wait_for(rig.sink)
    assert rig.sink.items[0].request_body == raw


async def test_upstream_down_gives_provider_shaped_502(rig):
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/dead/v1/messages", data=b"{}") as resp:
        assert resp.status == 502
        body = await resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/dead/v1/chat/completions", data=b"{}") as resp:
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_unreachable"
    await _wait_for(rig.sink, 2)
    assert [e.outcome for e in rig.sink.items] == [Outcome.UPSTREAM_UNREACHABLE] * 2


async def test_unknown_upstream_is_refused_not_forwarded(rig):
    async with aiohttp.ClientSession() as s:
        async with s.get(rig.base + "/u/evil.example.com/v1/models") as resp:
            assert resp.status == 404
        async with s.get(rig.base + "/http://example.com/") as resp:
            assert resp.status == 404
    assert rig.upstream.received == []


async def test_upstream_reset_truncates_client_too(rig):
    rig.upstream.mode = "reset"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.outcome == Outcome.UPSTREAM_RESET
    assert e.response_body == rig.upstream.sent[0]


async def test_client_disconnect_mid_stream_is_recorded(rig):
    rig.upstream.mode = "slow_stream"
    s = aiohttp.ClientSession()
    resp = await s.post(rig.base + "/u/up/v1/x", data=b"{}")
    await resp.content.readany()
    resp.close()
    await s.close()
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.outcome == Outcome.CLIENT_DISCONNECTED
    assert 0 < len(e.response_body) < len(b"".join(f"data: {i}\n\n".encode() for i in range(200)))


async def test_fifty_megabyte_body(rig):
    big = b"x" * (50 * 2**20)
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=big) as resp:
        assert (await resp.json())["echo_len"] == len(big)
    await _wait_for(rig.sink)
    assert rig.sink.items[0].request_body == big


async def test_a_chunked_request_body_in_many_http_chunks_is_forwarded_and_recorded_whole(rig):
    pieces = [bytes([65 + i % 26]) * (1000 + 37 * i) for i in range(300)]  # many HTTP chunks, some sent together

    async def body():
        for i, piece in enumerate(pieces):
            yield piece
            if i % 7 == 0:
                await asyncio.sleep(0)

    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=body()) as resp:
        assert (await resp.json())["echo_len"] == sum(map(len, pieces))
    assert rig.upstream.received[-1][1] == b"".join(pieces)
    await _wait_for(rig.sink)
    assert rig.sink.items[0].request_body == b"".join(pieces)


async def test_requests_without_a_body_one_after_another_are_forwarded_and_recorded(rig):
    async with aiohttp.ClientSession() as s:
        for _ in range(3):  # (aiohttp gives every bodiless request the same empty reader)
            async with s.get(rig.base + "/u/up/v1/models") as resp:
                assert (await resp.json())["echo_len"] == 0
    await _wait_for(rig.sink, 3)
    assert [e.request_body for e in rig.sink.items] == [b"", b"", b""]


def test_environment_proxy_is_honoured_for_remote_upstreams_only(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://corp-proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "api.internal.example")
    f = Forwarder(ProxySettings(upstreams={}, salt=b"s"), ListSink())
    assert f._env_proxy("https://api.anthropic.com") == "http://corp-proxy.internal:3128"
    assert f._env_proxy("https://api.internal.example") is None
    assert f._env_proxy("http://127.0.0.1:8000") is None
    assert f._env_proxy("http://localhost:8000") is None


async def test_small_json_answer_is_byte_exact_with_upstream_headers(rig):
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(rig.base + "/u/up/v1/chat/completions", data=b'{"m": 1}') as resp,
    ):
        got = await resp.read()
        assert resp.headers["Content-Length"] == str(len(got))
        assert resp.headers["Content-Type"] == "application/json"
    assert got == rig.upstream.sent[0]
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.response_body == got and e.outcome == Outcome.OK and e.first_byte_at is not None


async def test_a_body_still_arriving_is_passed_on_before_it_is_complete(rig):
    rig.upstream.mode = "late_body"
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp,
    ):
        first = await resp.content.readany()  # would hang if the proxy held the body back
        assert first == rig.upstream.sent[0]
        rig.upstream.release.set()
        rest = await resp.read()
    assert first + rest == b"".join(rig.upstream.sent)
    await _wait_for(rig.sink)
    assert rig.sink.items[0].response_body == first + rest


async def test_no_content_answer_and_head_request(rig):
    rig.upstream.mode = "no_content"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
        assert resp.status == 204 and resp.headers["X-Seen"] == "yes" and await resp.read() == b""
    rig.upstream.mode = "json"
    async with aiohttp.ClientSession() as s, s.head(rig.base + "/u/up/v1/x") as resp:
        assert resp.status == 200 and await resp.read() == b""
    await _wait_for(rig.sink, 2)
    assert [e.outcome for e in rig.sink.items] == [Outcome.OK, Outcome.OK]


async def test_query_is_forwarded_and_recorded_as_sent(rig):
    async with aiohttp.ClientSession() as s:
        url = yarl.URL(rig.base + "/u/up/v1/x?q=a%2Bb%20c&key=sk-query-secret-12345&x=%2F", encoded=True)
        async with s.post(url, data=b"{}") as resp:
            assert resp.status == 200
    assert rig.upstream.paths == ["/v1/x?q=a%2Bb%20c&key=sk-query-secret-12345&x=%2F"]
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert "sk-query-secret" not in e.query and e.query.startswith("q=a%2Bb")


@pytest.mark.parametrize("rig", [0.3], indirect=True)
async def test_upstream_silent_before_headers_times_out_with_a_provider_shaped_504(rig):
    rig.upstream.mode = "stall_head"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/messages", data=b"{}") as resp:
        assert resp.status == 504
        assert (await resp.json())["error"]["type"] == "timeout_error"
    await _wait_for(rig.sink)
    assert rig.sink.items[0].outcome == Outcome.TIMEOUT


@pytest.mark.parametrize("rig", [0.3], indirect=True)
async def test_upstream_silent_mid_stream_times_out_and_truncates_the_client(rig):
    rig.upstream.mode = "stall_mid"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
        assert await resp.content.readany() == rig.upstream.sent[0]
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.outcome == Outcome.TIMEOUT and e.response_body == rig.upstream.sent[0] and "0.3s" in e.error


@pytest.mark.parametrize("rig", [0.3], indirect=True)
async def test_a_slow_stream_that_keeps_sending_is_not_timed_out(rig):
    rig.upstream.mode = "slow_ok"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
        got = await resp.read()
    assert got == b"".join(rig.upstream.sent)
    await _wait_for(rig.sink)
    assert rig.sink.items[0].outcome == Outcome.OK


@pytest.mark.parametrize("rig", [0.3], indirect=True)
async def test_a_stream_that_goes_silent_after_reads_times_out_with_everything_it_sent(rig):
    rig.upstream.mode = "slow_then_silent"
    async with aiohttp.ClientSession() as s, s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    await _wait_for(rig.sink)
    e = rig.sink.items[0]
    assert e.outcome == Outcome.TIMEOUT and "0.3s" in e.error
    assert e.response_body == b"".join(rig.upstream.sent) and len(rig.upstream.sent) == 6


@pytest.mark.parametrize("rig", [0.3], indirect=True)
@pytest.mark.slow
async def test_the_read_timeout_left_armed_by_a_finished_call_times_the_next_call_on_its_connection(rig):
    """The timer outlives a finished answer on a kept-alive upstream connection: idle, it fires
    without effect; the next call's silence is timed from that call's own start."""
    async with aiohttp.ClientSession() as s:
        async with s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
            assert resp.status == 200
        await asyncio.sleep(0.45)  # idle past one read_timeout: the timer fired with no call waiting
        async with s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
            assert resp.status == 200
        await asyncio.sleep(0.2)  # then armed by that call; the next one starts before it is due
        rig.upstream.mode, rig.upstream.sent = "slow_ok", []  # 0.1 s pauses: never a read_timeout of silence
        async with s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
            assert await resp.read() == b"".join(rig.upstream.sent)
        rig.upstream.mode = "stall_head"
        started = time.monotonic()
        async with s.post(rig.base + "/u/up/v1/messages", data=b"{}") as resp:
            assert resp.status == 504
        assert 0.28 <= time.monotonic() - started < 1.5
    await _wait_for(rig.sink, 4)
    assert [e.outcome for e in rig.sink.items] == [Outcome.OK, Outcome.OK, Outcome.OK, Outcome.TIMEOUT]


async def test_no_header_is_invented_and_none_is_lost(rig):
    bare = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
    async with aiohttp.ClientSession(skip_auto_headers=bare) as s:
        async with s.post(rig.base + "/u/up/v1/x", data=b"{}") as resp:
            assert resp.status == 200
        full = {
            "User-Agent": "sdk/1",
            "Accept": "application/json",
            "Accept-Encoding": "zstd",
            "Content-Type": "text/x",
        }
        async with s.post(rig.base + "/u/up/v1/x", data=b"{}", headers=full) as resp:
            assert resp.status == 200
    sent_bare, sent_full = rig.upstream.received[0][0], rig.upstream.received[1][0]
    assert not set(bare) & set(sent_bare)
    assert {k: sent_full[k] for k in full} == full


def test_settle_gc_freezes_start_up_objects_and_collects_less_often():
    import subprocess
    import sys

    code = (
        "import gc; from ctxscope.proxy.server import settle_gc; settle_gc(); "
        "print(gc.get_freeze_count() > 1000, gc.get_threshold()[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "20000"]


async def test_headers_are_passed_on_before_any_body_arrives(rig):
    rig.upstream.mode = "headers_then_wait"
    async with aiohttp.ClientSession() as s:
        resp = await asyncio.wait_for(s.post(rig.base + "/u/up/v1/x", data=b"{}"), 10)  # hangs if held back
        assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
        rig.upstream.release.set()
        assert await resp.read() == b"data: late\n\n"
        resp.release()
    await _wait_for(rig.sink)
    assert rig.sink.items[0].outcome == Outcome.OK


async def test_a_provider_path_without_a_route_prefix_gets_a_json_404_naming_the_prefixes(rig):
    import openai

    async with aiohttp.ClientSession() as s:
        async with s.post(rig.base + "/v1/chat/completions", json={"model": "m", "messages": []}) as resp:
            assert resp.status == 404 and resp.content_type == "application/json"
            assert resp.headers["Content-Security-Policy"] == "sandbox"
            err = (await resp.json())["error"]
            assert err["code"] == "no_route_prefix" and "/openai/v1/chat/completions" in err["message"]
        async with s.post(rig.base + "/v1/messages", json={}) as resp:
            body = await resp.json()
            assert resp.status == 404 and body["type"] == "error"
            assert "/anthropic/v1/messages" in body["error"]["message"]
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=rig.base + "/v1", max_retries=0)
    try:
        with pytest.raises(openai.NotFoundError, match="provider prefix"):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()
    assert rig.upstream.received == []


class ExpectingSink(ListSink):
    """A sink that wants word when each call begins (as the writer whose child sleeps when idle)."""

    def __init__(self, events: list[str]):
        super().__init__()
        self.events = events

    def expect(self):
        self.events.append("expect")

    def submit(self, exchange):
        self.events.append("submit")
        super().submit(exchange)


async def test_a_sink_that_expects_calls_hears_of_each_before_it_goes_upstream():
    events: list[str] = []

    async def upstream(request):
        await request.read()
        events.append("upstream")
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream)
    up_runner, up_url = await _serve(app)
    sink = ExpectingSink(events)
    runner = make_runner(create_proxy_app(Forwarder(ProxySettings(upstreams={"up": up_url}, salt=b"s" * 32), sink)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as s:
            for n in (1, 2):
                async with s.post(base + "/u/up/v1/chat/completions", data=b'{"model": "m"}') as resp:
                    assert resp.status == 200
                await sink.wait(n)
    finally:
        await runner.cleanup()
        await up_runner.cleanup()
    assert events == ["expect", "upstream", "submit"] * 2
