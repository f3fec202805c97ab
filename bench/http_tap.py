"""A recording HTTP relay for benches: what one side sent is what the other side received?

`Tap` listens on a loopback port, forwards every request to a target base URL, streams the answer
back unchanged, and keeps each exchange's request and response bodies as bytes (compressed bodies
stay compressed: nothing is decoded). WebSocket upgrades are relayed message by message and kept
as one exchange per connection (the messages each way, joined by a newline). It runs on its own
event loop in a thread, so a synchronous bench can start it, run clients, then read `exchanges`.
Benches use two taps, one before the daemon and one after it, and compare the bodies both ways.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "content-length", "host"}


@dataclass
class Exchange:
    """One request and its answer as they crossed the tap."""

    method: str
    path: str
    request: bytes
    response: bytes = b""
    status: int = 0
    websocket: bool = False
    sent: list[bytes] = field(default_factory=list)  # a WebSocket's messages, each way
    received: list[bytes] = field(default_factory=list)


@dataclass
class Tap:
    """A relay from ``127.0.0.1:port`` to ``target`` that records what crosses it."""

    target: str
    port: int = 0
    exchanges: list[Exchange] = field(default_factory=list)

    def start(self) -> Tap:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)
        return self

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(ready))
        self._loop.run_forever()

    async def _serve(self, ready: threading.Event) -> None:
        # auto_decompress off: the bytes compared are the bytes on the wire
        self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        runner = web.AppRunner(app, auto_decompress=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        self.port = runner.addresses[0][1]
        ready.set()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._relay_websocket(request)
        body = await request.read()
        exchange = Exchange(request.method, request.path_qs, body)
        self.exchanges.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with self._session.request(
            request.method, self.target + request.path_qs, data=body, headers=headers, allow_redirects=False
        ) as upstream:
            exchange.status = upstream.status
            answer = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP:
                    answer.headers.add(key, value)
            await answer.prepare(request)
            parts = []
            async for chunk in upstream.content.iter_any():
                parts.append(chunk)
                await answer.write(chunk)
            exchange.response = b"".join(parts)
            await answer.write_eof()
            return answer

    async def _relay_websocket(self, request: web.Request) -> web.WebSocketResponse:
        exchange = Exchange(request.method, request.path_qs, b"", websocket=True)
        self.exchanges.append(exchange)
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in HOP and not k.lower().startswith("sec-websocket")
        }
        target = self.target.replace("http", "ws", 1) + request.path_qs
        client = web.WebSocketResponse()
        await client.prepare(request)
        sent, received = exchange.sent, exchange.received
        async with self._session.ws_connect(target, headers=headers) as upstream:
            exchange.status = 101

            async def pump(source: Any, sink: Any, kept: list[bytes]) -> None:
                async for message in source:
                    if message.type == aiohttp.WSMsgType.TEXT:
                        kept.append(message.data.encode())
                        await sink.send_str(message.data)
                    elif message.type == aiohttp.WSMsgType.BINARY:
                        kept.append(message.data)
                        await sink.send_bytes(message.data)
                    else:
                        break
                await sink.close()

            await asyncio.gather(pump(client, upstream, sent), pump(upstream, client, received))
        exchange.request = b"\n".join(sent)
        exchange.response = b"\n".join(received)
        return client
