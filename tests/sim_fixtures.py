"""The provider simulator for tests: in a thread for the SDK tests (``sim`` and ``fresh`` are pytest fixtures
a module imports by name), or in the test's own event loop for the agent tests (``loop_simulator``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from ctxscope.simulator.app import STATE_KEY, create_app, make_runner
from ctxscope.simulator.background import simulator_in_thread


@pytest.fixture(scope="module")
def sim():
    """One simulator in a thread per test module."""
    with simulator_in_thread() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(sim):
    """Each test starts from an empty script; the clock and the context window are put back after it."""
    sim.state.reset()
    yield
    sim.state.clock = time.time
    sim.state.context_window = 200_000


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
