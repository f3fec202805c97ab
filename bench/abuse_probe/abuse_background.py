"""The abuse bench's background process: a fast upstream, and a legit client that sends a small
call through the proxy every 10 ms for the whole run and reports each call's latency.

Protocol on stdin/stdout: prints ``LISTENING <port>`` once the upstream listens; ``GO <proxy url>``
starts the client; ``STOP`` stops it (``DONE <calls>``); end of stdin ends the process. Each call
prints ``S <monotonic start> <latency ms> <status, 0 = no answer> <tag>``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import aiohttp
from aiohttp import web
from yarl import URL

INTERVAL = 0.01
CALL_TIMEOUT = 20.0
MAX_SECONDS = 600.0  # the process ends on its own whatever happens to the bench
CHAT = json.dumps(
    {
        "id": "chatcmpl-bg",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-bg",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()
BODY = json.dumps({"model": "gpt-bg", "messages": [{"role": "user", "content": "ping"}]}).encode()


async def _answer(request: web.Request) -> web.Response:
    async for _ in request.content.iter_chunked(1 << 20):  # any size, never held
        pass
    return web.Response(body=CHAT, content_type="application/json")


async def _client(base: str, stop: asyncio.Event) -> int:
    sent = 0
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT)
    headers = {"Content-Type": "application/json", "X-Ctxscope-Session": "abuse-bg"}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        next_at = time.monotonic()
        while not stop.is_set():
            tag = f"bg-{sent:06d}"
            sent += 1
            url = URL(f"{base}/u/fast/v1/chat/completions?call={tag}", encoded=True)
            t0 = time.monotonic()
            status = 0
            for _attempt in range(2):  # a keep-alive connection the proxy closed just now: once more
                try:
                    async with session.post(url, data=BODY, headers=headers) as r:
                        await r.read()
                        status = r.status
                    break
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    continue
                except (TimeoutError, aiohttp.ClientError):
                    break
            latency = (time.monotonic() - t0) * 1000
            print(f"S {t0:.6f} {latency:.3f} {status} {tag}", flush=True)
            next_at = max(next_at + INTERVAL, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())
    return sent


async def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"LISTENING {runner.addresses[0][1]}", flush=True)

    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())
        loop.call_soon_threadsafe(commands.put_nowait, "EOF")

    threading.Thread(target=read_stdin, daemon=True).start()
    stop = asyncio.Event()
    client: asyncio.Task | None = None
    end = time.monotonic() + MAX_SECONDS
    while True:
        try:
            cmd = await asyncio.wait_for(commands.get(), max(0.1, end - time.monotonic()))
        except TimeoutError:
            cmd = "EOF"
        if cmd.startswith("GO ") and client is None:
            client = asyncio.create_task(_client(cmd[3:].strip(), stop))
        elif cmd in ("STOP", "EOF") and client is not None and not stop.is_set():
            stop.set()
            print(f"DONE {await client}", flush=True)
        if cmd == "EOF":
            break
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
