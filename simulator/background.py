"""Run a simulator on loopback in a background thread (for sync SDK clients and other tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ctxscope.simulator.app import start_simulator
from ctxscope.simulator.state import STATE_KEY, SimulatorState


@dataclass(frozen=True)
class RunningSimulator:
    base_url: str  # http://127.0.0.1:PORT (append /v1 for the OpenAI SDK, or not: both work)
    app: web.Application
    loop: asyncio.AbstractEventLoop

    @property
    def state(self) -> SimulatorState:
        return self.app[STATE_KEY]


@contextmanager
def simulator_in_thread(
    script: Iterable[dict[str, Any]] | None = None, *, context_window: int = 200_000
) -> Iterator[RunningSimulator]:
    """Start a simulator on 127.0.0.1:0 in its own thread and event loop; stop it on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="ctxscope-simulator", daemon=True)
    thread.start()
    try:
        future = asyncio.run_coroutine_threadsafe(start_simulator(script=script, context_window=context_window), loop)
        runner, base_url = future.result(timeout=30)
        try:
            yield RunningSimulator(base_url, runner.app, loop)
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
