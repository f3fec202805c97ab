"""A forwarding proxy with chosen limits in front of a chosen upstream, and raw-socket helpers:
the pieces the limit, outcome and path tests attack. Everything is real and on loopback."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from dataclasses import dataclass

import pytest
from aiohttp import web

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.defence.limits import Limits
from ctxscope.proxy.forward.forwarder import Forwarder, ProxySettings
from ctxscope.proxy.server import create_proxy_app, make_runner


class ListSink:
    def __init__(self):
        self.items: list[ex.Exchange] = []

    def submit(self, exchange):
        self.items.append(exchange)

    async def wait(self, n: int = 1, timeout: float = 10.0) -> list[ex.Exchange]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.items) >= n:
                return self.items
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {n} captured exchanges, got {len(self.items)}: {self.items}")


@dataclass
class Proxy:
    runner: web.AppRunner
    forwarder: Forwarder
    sink: ListSink
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def server(self):
        return self.runner.server

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_proxy(
    upstreams: dict[str, str], limits: Limits | None = None, read_timeout: float = 600.0, connect_timeout: float = 30.0
) -> Proxy:
    sink = ListSink()
    settings = ProxySettings(
        upstreams=upstreams,
        salt=b"s" * 32,
        read_timeout=read_timeout,
        connect_timeout=connect_timeout,
        limits=limits or Limits(),
    )
    forwarder = Forwarder(settings, sink)
    runner = make_runner(create_proxy_app(forwarder))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return Proxy(runner, forwarder, sink, site._server.sockets[0].getsockname()[1])


async def serve_app(app: web.Application, **runner_kwargs) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, **runner_kwargs)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open after ``seconds``."""
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        except ConnectionError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the connection was still open after {seconds}s (got {got[:200]!r})")


async def trickle(writer: asyncio.StreamWriter, data: bytes, every: float, until: float) -> int:
    """Send ``data`` one byte every ``every`` seconds for at most ``until`` seconds or until the
    connection breaks; returns how many bytes went out."""
    sent = 0
    deadline = time.monotonic() + until
    for byte in data:
        if time.monotonic() > deadline or writer.is_closing():
            break
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        sent += 1
        await asyncio.sleep(every)
    return sent


def reset_socket(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP request head and its Content-Length body, as a raw upstream reads it."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


# asyncio's own loop and uvloop (what `ctxscope serve` runs on): transports differ in how they report a
# closed or reset connection, and the guards must work on both. A module runs every test on both by
# importing these two fixtures (pytest-asyncio calls overriding its policy fixture deprecated; the
# check below fails loudly the day the override stops taking effect, instead of testing one loop twice).
@pytest.fixture(params=["asyncio", "uvloop"], scope="module")
def event_loop_policy(request):
    import uvloop

    return uvloop.EventLoopPolicy() if request.param == "uvloop" else asyncio.DefaultEventLoopPolicy()


@pytest.fixture(autouse=True)
async def on_the_chosen_loop(event_loop_policy):
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop) == isinstance(event_loop_policy, uvloop.EventLoopPolicy)
