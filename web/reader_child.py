"""The UI's store reads in a process of their own, which ends when the reads stop.

A read loads sqlite-utils, the pages' views, the price table (pydantic) and the analyses: about
21 MB of code that a Python process never gives back, and the heap a big read leaves holed. So
``serve`` answers its store routes here (``python -m ctxscope.web.reader_child DB SOCKET
IDLE_RELEASE``), started by the daemon on the first such request (``reader.py``) and stopped once
idle; its memory goes back to the system when it exits (docs/architecture.md, "Memory").

The daemon checks each request (host, key, token) before it forwards it over an owner-only unix
socket, and sends the address the request came in on (``OWN_URL_HEADER``: replay and the cURL view
send calls back through it). Lines on stdin are the writer's status for the live feed; their end
(the daemon stopped us, or died) ends this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

from aiohttp import web

from ctxscope.web.api import OWN_URL, StoreAPI
from ctxscope.web.calldetail import BodyCache
from ctxscope.web.reader import FORGET, OWN_URL_HEADER  # set by the daemon only: this socket is the daemon's alone
from ctxscope.web.routes import API, STORE_ROUTES, Handler, StoreRoute, json_errors, json_response

TOTALS = f"{API}/status"  # the store's totals for the daemon's status route


def _status_feed(latest: list[dict | None], loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Keep ``latest[0]`` to the writer's status the daemon sends; stop at the pipe's end."""
    for line in sys.stdin.buffer:
        with contextlib.suppress(ValueError):
            latest[0] = json.loads(line)
    loop.call_soon_threadsafe(stop.set)


async def serve(db: Path, socket_path: str, idle_release: float | None) -> None:
    latest: list[dict | None] = [None]
    api = StoreAPI(db, None, lambda: latest[0], idle_release)

    def store_route(route: StoreRoute) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            request[OWN_URL] = request.headers.get(OWN_URL_HEADER)
            try:
                answer = await api.answer(route(api), request)
            except ConnectionResetError:  # the daemon let go of the answer: its client went away
                return web.Response(status=499)
            return answer if isinstance(answer, web.StreamResponse) else json_response(answer)

        return json_errors(handler)

    async def totals(request: web.Request) -> web.StreamResponse:
        return json_response(await api.totals())

    app = web.Application(client_max_size=1 << 20)
    for method, path, route in STORE_ROUTES:
        app.router.add_route(method, path, store_route(route))

    async def forget(request: web.Request) -> web.StreamResponse:
        api.bodies = BodyCache()  # a session was deleted: none of its bodies stays
        return json_response({})

    app.router.add_get(TOTALS, json_errors(totals))
    app.router.add_post(FORGET, forget)

    async def closing(app: web.Application) -> None:
        await api.close()

    app.on_shutdown.append(closing)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, socket_path).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    threading.Thread(target=_status_feed, args=(latest, loop, stop), daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        api.cleanup()


def main() -> None:
    db, socket_path, idle_release = sys.argv[1:4]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the daemon, which stops us in order
    work = serve(Path(db), socket_path, float(idle_release) if idle_release else None)
    try:  # on uvloop, as the daemon: a client that leaves is the same ConnectionResetError
        import uvloop

        uvloop.run(work)
    except ImportError:
        asyncio.run(work)


if __name__ == "__main__":
    main()
