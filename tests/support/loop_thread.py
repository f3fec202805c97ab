"""An asyncio loop in a daemon thread, so a real daemon can serve while a test uses sync clients."""

from __future__ import annotations

import asyncio
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
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():  # a loop still running cannot be closed; it dies with the process
            self.loop.close()
