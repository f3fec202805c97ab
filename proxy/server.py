"""The daemon's aiohttp application: provider routes go to the forwarder, the rest to extra routes."""

from __future__ import annotations

import gc
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ctxscope.proxy.defence.connection import ProxyRunner
from ctxscope.proxy.defence.limits import Limits
from ctxscope.proxy.forward.answers import UNPREFIXED, unprefixed
from ctxscope.proxy.forward.forwarder import Forwarder
from ctxscope.proxy.sockets.connect import ConnectProxy
from ctxscope.proxy.sockets.relay import WebSocketRelay

if TYPE_CHECKING:  # cryptography is imported on the first intercepted CONNECT only
    from ctxscope.proxy.sockets.ca import LocalCA

FORWARDER_KEY = web.AppKey("forwarder", Forwarder)
CONNECT_KEY = web.AppKey("connect", ConnectProxy)


def create_proxy_app(forwarder: Forwarder, ca_folder: Path | None = None) -> web.Application:
    """An app whose provider prefixes are forwarded; add UI/API routes to it before starting. With
    ``ca_folder`` its port also serves CONNECT, intercepting the upstreams' hosts with that CA.

    The forwarder reads provider bodies itself (and answers an oversized one in the provider's
    shape); the other routes' bodies are bounded by the same max_body_bytes limit."""
    app = web.Application(client_max_size=forwarder.settings.limits.max_body_bytes)
    app[FORWARDER_KEY] = forwarder
    settings = forwarder.settings
    sockets = WebSocketRelay(
        settings.connect_timeout,
        settings.limits.max_body_bytes,
        settings.salt,
        lambda exchange: forwarder.sink.submit(exchange),
        forwarder.asker,
    )
    forwarder.websockets = sockets
    connect = None
    if ca_folder is not None:
        folder = ca_folder

        # made on the first intercepted CONNECT (cryptography is imported only then)
        def local_ca(hosts: Collection[str]) -> LocalCA:
            from ctxscope.proxy.sockets.ca import LocalCA

            return LocalCA(folder, hosts)

        connect = app[CONNECT_KEY] = ConnectProxy(
            settings.upstreams, local_ca, forwarder.handle_intercepted, settings.limits, settings.connect_timeout
        )

    async def on_startup(app: web.Application) -> None:
        await app[FORWARDER_KEY].start()

    async def on_shutdown(app: web.Application) -> None:
        await sockets.shutdown()
        if connect is not None:
            await connect.shutdown()

    async def on_cleanup(app: web.Application) -> None:
        await app[FORWARDER_KEY].close()
        await sockets.close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    for prefix in ("/anthropic", "/openai", "/gemini", "/u", "/s"):
        app.router.add_route("*", prefix + "/{tail:.*}", forwarder.handle)
    for path in UNPREFIXED:  # a base URL without a prefix gets a JSON answer that names the prefixes
        app.router.add_route("*", path, unprefixed)
    return app


def make_runner(app: web.Application, limits: Limits | None = None) -> web.AppRunner:
    """A runner whose connections are guarded by ``limits`` (see proxy.connection).

    Compressed request bodies must reach the upstream as they came: no server-side decompression.
    aiohttp never cancels a handler whose client left (the guard tells the forwarder instead, which
    records the call before it stops); stopping waits ``shutdown_grace`` for open calls."""
    if limits is None:
        forwarder = app.get(FORWARDER_KEY)
        limits = forwarder.settings.limits if forwarder is not None else Limits()
    return ProxyRunner(
        app,
        limits,
        tunnels=app.get(CONNECT_KEY),
        auto_decompress=False,
        access_log=None,
        handler_cancellation=False,
        keepalive_timeout=limits.keepalive_timeout,
        shutdown_timeout=limits.shutdown_grace,
    )


def settle_gc() -> None:
    """Call once a serving process has started: Python's collector then leaves the start-up objects
    alone and runs less often on the many short-lived objects each request makes.

    Without it a collection ran every 700 new objects and each full one walked the daemon's ~45,000
    start-up objects. Interleaved c32 small-JSON runs against ctxscope serve (8 rounds): 4121 -> 4503
    req/s, loop thread 0.214 -> 0.190 ms per request. Not for a test process: frozen objects stay
    until the process ends, so it belongs in the composition root that serves.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20000, 20, 20)
