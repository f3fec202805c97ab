"""Upstreams on loopback that the abuse cases aim the proxy at, each recording what it saw.

- ``multi`` (aiohttp): echoes any path (what the upstream saw is recorded, raw), serves HTML for
  ``*.html``, and reads any body as it comes (length and sha256), never decompressing it.
- ``silent`` (raw asyncio): reads the request, then waits up to 30 s without answering, noting
  when the proxy closes the connection.
- ``rst`` (raw asyncio): answers 200 with a body delimited by connection close, sends a few
  bytes, then resets the connection (SO_LINGER 0).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import time
from dataclasses import dataclass

from aiohttp import web

SILENT_SECONDS = 30.0
HTML = b"<!doctype html><title>upstream page</title><script>document.title = 'ran on the UI origin'</script>"


@dataclass
class Seen:
    t: float
    method: str
    raw_path: str
    headers: dict[str, str]
    body_len: int
    body_sha256: str


@dataclass
class SilentConn:
    request_line: str = ""
    t_request: float | None = None
    t_closed: float | None = None  # when the proxy closed (EOF or reset)


class Upstreams:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.silent: list[SilentConn] = []
        self.rst_served = 0
        self._runner: web.AppRunner | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self.multi_port = self.silent_port = self.rst_port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._multi)
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.multi_port = self._runner.addresses[0][1]
        silent = await asyncio.start_server(self._track(self._silent), "127.0.0.1", 0)
        rst = await asyncio.start_server(self._track(self._rst), "127.0.0.1", 0)
        self._servers += [silent, rst]
        self.silent_port = silent.sockets[0].getsockname()[1]
        self.rst_port = rst.sockets[0].getsockname()[1]

    def urls(self) -> dict[str, str]:
        multi = f"http://127.0.0.1:{self.multi_port}"
        return {
            "up": multi,
            "pref": multi + "/base",
            "silent": f"http://127.0.0.1:{self.silent_port}",
            "rst": f"http://127.0.0.1:{self.rst_port}",
        }

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for server in self._servers:
            server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _track(self, handler):
        async def run(reader, writer):
            task = asyncio.current_task()
            self._tasks.add(task)
            try:
                await handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                self._tasks.discard(task)
                writer.close()

        return run

    async def _multi(self, request: web.Request) -> web.Response:
        digest, n = hashlib.sha256(), 0
        async for chunk in request.content.iter_chunked(1 << 20):
            digest.update(chunk)
            n += len(chunk)
        self.seen.append(
            Seen(time.monotonic(), request.method, request.raw_path, dict(request.headers), n, digest.hexdigest())
        )
        if request.raw_path.split("?")[0].endswith(".html"):
            return web.Response(body=HTML, content_type="text/html")
        return web.json_response({"path": request.raw_path, "bytes": n})

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> bytes:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await asyncio.wait_for(reader.readexactly(int(line.split(b":")[1])), 10)
        return head

    async def _silent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = SilentConn()
        self.silent.append(conn)
        try:
            head = await self._read_request(reader)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            conn.t_closed = time.monotonic()
            return
        conn.request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        conn.t_request = time.monotonic()
        deadline = conn.t_request + SILENT_SECONDS
        try:
            while time.monotonic() < deadline:
                data = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
                if not data:
                    conn.t_closed = time.monotonic()
                    return
        except ConnectionError:
            conn.t_closed = time.monotonic()
            return
        except TimeoutError:
            pass
        body = b'{"id":"late","object":"chat.completion","choices":[]}'
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        await writer.drain()

    async def _rst(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._read_request(reader)
        self.rst_served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n")
        for i in range(3):
            writer.write(b'data: {"choices":[{"index":0,"delta":{"content":"part %d "}}]}\n\n' % i)
            await writer.drain()
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
