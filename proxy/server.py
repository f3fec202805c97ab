"""The daemon's aiohttp application: provider routes go to the forwarder, the rest to extra routes."""

from __future__ import annotations

from aiohttp import web

from .forward import Forwarder

FORWARDER_KEY = web.AppKey("forwarder", Forwarder)
PROVIDER_PREFIXES = ("/anthropic/", "/openai/", "/u/", "/s/")
MAX_BODY = 256 * 2**20


def is_provider_path(path: str) -> bool:
    return path.startswith(PROVIDER_PREFIXES)


def create_proxy_app(forwarder: Forwarder, *, max_body: int = MAX_BODY) -> web.Application:
    """An app whose provider prefixes are forwarded; add UI/API routes to it before starting."""
    app = web.Application(client_max_size=max_body)
    app[FORWARDER_KEY] = forwarder

    async def on_startup(app: web.Application) -> None:
        await app[FORWARDER_KEY].start()

    async def on_cleanup(app: web.Application) -> None:
        await app[FORWARDER_KEY].close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    for prefix in ("/anthropic", "/openai", "/u", "/s"):
        app.router.add_route("*", prefix + "/{tail:.*}", forwarder.handle)
    return app


def make_runner(app: web.Application) -> web.AppRunner:
    """Compressed request bodies must reach the upstream as they came: no server-side decompression."""
    return web.AppRunner(app, auto_decompress=False, access_log=None, handler_cancellation=False)
