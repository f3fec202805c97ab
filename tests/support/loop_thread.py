"""An asyncio loop in a daemon thread, so a real daemon can serve while a test uses sync clients."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class LoopThread:
    """`call(coro)` runs a coroutine on the loop thread and waits for its result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        # What still runs ends, and the closes it scheduled run, before the loop stops (a wedged
        # loop is stopped all the same).
        with contextlib.suppress(Exception):
            self.call(_wind_down(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():  # a loop still running cannot be closed; it dies with the process
            self.loop.close()


async def _wind_down() -> None:
    """Cancel the loop's other tasks and let their callbacks run: a transport closed by a cleanup
    closes its socket in a callback, and a loop stopped before it runs leaves the socket to the
    garbage collector (a ResourceWarning in a later test)."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.get_running_loop().shutdown_asyncgens()
