"""Per-simulator state: the script queue, the request log, the prompt cache, a clock and the
control token.

Tests in the same process reach it as ``app[STATE_KEY]`` and may push steps, read the log or
replace ``clock`` (seconds, default ``time.time``) to expire cache TTLs without sleeping; other
processes use the HTTP control plane with ``control_token`` (see ``control.SimulatorControl``).
The aiohttp loop may run in another thread than the test, so queue and log changes take a lock.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from ctxscope.simulator.control.requestlog import RequestLog
from ctxscope.simulator.model.cache import PromptCache
from ctxscope.simulator.model.diagnosis import Fingerprint
from ctxscope.simulator.model.ids import IdMaker
from ctxscope.simulator.model.prompt import Block
from ctxscope.simulator.model.script import Step, parse_script

MAX_REMEMBERED_RESPONSES = 1000


class SimulatorState:
    def __init__(
        self,
        script: Iterable[dict[str, Any]] | None = None,
        *,
        context_window: int = 200_000,
        control_token: str | None = None,
    ) -> None:
        self.context_window = context_window
        self.control_token = control_token or secrets.token_urlsafe(32)
        self.clock: Callable[[], float] = time.time
        self.fixed_clock: float | None = None  # set over HTTP (/_sim/config "clock"): the time the cache sees
        self.cache = PromptCache()
        # Anthropic's own API leaves per-request metadata (Claude Code's billing header) out of its
        # cache key; False (/_sim/config "provider_itself") plays an Anthropic-compatible endpoint.
        self.provider_itself = True
        self.ids = IdMaker()
        self.responses: dict[str, tuple[Block, ...]] = {}  # Responses id -> conversation blocks
        self.fingerprints: dict[str, Fingerprint] = {}  # answer id -> its request, for cache diagnoses
        self._lock = threading.Lock()
        self._queue: list[Step] = []
        self._requests = RequestLog()
        if script:
            self.set_script(list(script))

    # ------------------------------------------------------------ script queue

    def set_script(self, steps: list[dict[str, Any]]) -> None:
        """Replace the queue (raises ScriptError on an invalid step; the old queue is kept)."""
        parsed = parse_script(steps)
        with self._lock:
            self._queue = parsed

    def append_script(self, steps: list[dict[str, Any]]) -> None:
        parsed = parse_script(steps)
        with self._lock:
            self._queue.extend(parsed)

    def pending(self) -> list[dict[str, Any]]:
        """The queued steps as they were given."""
        with self._lock:
            return [dict(step.raw) for step in self._queue]

    def has_steps(self) -> bool:
        """True while any step is queued (matching or not): the agentic answers wait for an empty queue."""
        with self._lock:
            return bool(self._queue)

    def peek(self, last_text: str) -> Step | None:
        """The first queued step eligible for a request whose last message text is `last_text`."""
        with self._lock:
            return next((step for step in self._queue if step.matches(last_text)), None)

    def take(self, step: Step) -> None:
        with self._lock:
            for i, queued in enumerate(self._queue):
                if queued is step:
                    del self._queue[i]
                    return

    # ------------------------------------------------------------ request log

    def log(self, entry: dict[str, Any], cost: int | None = None) -> None:
        """Keep a request summary; ``cost`` is its size in bytes (estimated when not given)."""
        self._requests.add(entry, cost)

    def remember_response(self, response_id: str, blocks: tuple[Block, ...]) -> None:
        """Keep a Responses conversation for previous_response_id (oldest forgotten first)."""
        self.responses[response_id] = blocks
        while len(self.responses) > MAX_REMEMBERED_RESPONSES:
            del self.responses[next(iter(self.responses))]

    def remember_fingerprint(self, response_id: str, fingerprint: Fingerprint) -> None:
        """Keep what a later cache diagnosis compares with (oldest forgotten first)."""
        self.fingerprints[response_id] = fingerprint
        while len(self.fingerprints) > MAX_REMEMBERED_RESPONSES:
            del self.fingerprints[next(iter(self.fingerprints))]

    def requests(self) -> list[dict[str, Any]]:
        return self._requests.entries()

    # ------------------------------------------------------------ reset

    def reset(self) -> None:
        """Forget the queue, the request log, cache entries, stored responses and id sequence."""
        with self._lock:
            self._queue = []
        self._requests.clear()
        self.cache.clear()
        self.responses.clear()
        self.fingerprints.clear()
        self.ids.reset()


STATE_KEY = web.AppKey("ctxscope_simulator_state", SimulatorState)
