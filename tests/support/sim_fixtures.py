"""The provider simulator in the test's own event loop, for the agent tests (``loop_simulator``); the
SDK tests' simulator in a thread is the ``sim_alone`` fixture of conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from ctxscope.simulator.app import STATE_KEY, create_app, make_runner


@asynccontextmanager
async def loop_simulator() -> AsyncIterator[tuple[Any, str]]:
    """(state, base URL) of a simulator in this event loop, like start_simulator but with a short shutdown
    grace: a cancelled client leaves a delayed handler behind."""
    runner = make_runner(create_app(), shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield runner.app[STATE_KEY], f"http://{host}:{port}"
    finally:
        await runner.cleanup()
