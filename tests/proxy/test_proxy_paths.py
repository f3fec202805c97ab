"""Where a forwarded request may go and how its answer is served: no path leaves the upstream's
base path, the simulator's control endpoints need a local Host, and whatever comes back runs
sandboxed. Requests are written on raw sockets so no client library tidies the path first."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from ctxscope.proxy.forward.routing import check_path

from support.proxy_rig import serve_app, start_proxy


class Recorder:
    def __init__(self):
        self.paths: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.raw_path)
        return web.Response(
            text="<script>alert(1)</script>",
            content_type="text/html",
            headers={"Content-Security-Policy": "default-src 'self'"},
        )


@pytest.fixture
async def rig():
    upstream = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    up_runner, up_url = await serve_app(app)
    proxy = await start_proxy({"pref": up_url + "/base", "anthropic": up_url + "/base"})
    yield proxy, upstream
    await proxy.stop()
    await up_runner.cleanup()


async def _raw(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, body


ESCAPES = [
    "/u/pref/../echo",
    "/u/pref/v1/../../echo",
    "/u/pref/%2e%2e/echo",
    "/u/pref/%2E%2e/echo",
    "/u/pref/%252e%252e/echo",
    "/u/pref/..%2fecho",
    "/u/pref/..%5cecho",
    "/u/pref/..\\echo",
    "/u/pref/..;x/echo",
    "/u/pref/./echo",
    "/u/pref/..",
    "/anthropic/../echo",
]


@pytest.mark.parametrize("path", ESCAPES)
async def test_dot_segments_in_any_spelling_are_refused_and_never_forwarded(rig, path):
    proxy, upstream = rig
    status, head, body = await _raw(proxy.port, path)
    assert status == 400, head
    assert b"'..' segment" in body and b"application/json" in head
    assert upstream.paths == []


def test_dots_inside_a_segment_are_names_not_steps():
    assert not check_path("/v1/a..b/c.d/...")
    with pytest.raises(ValueError):
        check_path("/v1/%2e%2e")


async def test_anthropic_routes_get_anthropic_error_json_for_an_escape(rig):
    proxy, _ = rig
    status, _, body = await _raw(proxy.port, "/anthropic/v1/../../echo")
    assert status == 400
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


async def test_ordinary_paths_stay_below_the_base(rig):
    proxy, upstream = rig
    status, _, _ = await _raw(proxy.port, "/u/pref/v1/models/a..b:generate?x=%2F")
    assert status == 200 and upstream.paths == ["/base/v1/models/a..b:generate?x=%2F"]


async def test_every_forwarded_answer_is_sandboxed_beside_the_upstreams_own_policy(rig):
    proxy, _ = rig
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.base + "/u/pref/docs/x.html") as resp:
            policies = resp.headers.getall("Content-Security-Policy")
            assert "sandbox" in policies and "default-src 'self'" in policies
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
        async with s.get(proxy.base + "/u/nowhere/x") as resp:  # the proxy's own answers too
            assert resp.status == 404 and resp.headers["Content-Security-Policy"] == "sandbox"


@pytest.mark.parametrize(
    "path",
    [
        "/u/pref/_sim/requests",
        "/u/pref/%5fsim/requests",
        "/u/pref//_sim/script",
        "/u/pref/_SIM/reset",
        "/s/lbl/u/pref/_sim/requests",
    ],
)
async def test_simulator_control_paths_need_a_local_host(rig, path):
    proxy, upstream = rig
    status, _, body = await _raw(proxy.port, path, host="evil.example")  # a rebound DNS name
    assert status == 403 and b"Host" in body
    assert upstream.paths == []
    for local in ("127.0.0.1:8787", "localhost", "[::1]:8787"):
        status, _, _ = await _raw(proxy.port, path, host=local)
        assert status == 200
    assert len(upstream.paths) == 3


async def test_every_provider_route_needs_a_local_host(rig):
    """A rebound DNS name reaches no upstream on any path (docs/architecture.md, "Provider routes
    refuse foreign pages"); a local Host goes through."""
    proxy, upstream = rig
    status, _, _ = await _raw(proxy.port, "/u/pref/v1/sim/requests", host="evil.example")
    assert status == 403 and upstream.paths == []
    status, _, _ = await _raw(proxy.port, "/u/pref/v1/sim/requests", host="localhost:8787")
    assert status == 200 and upstream.paths == ["/base/v1/sim/requests"]
