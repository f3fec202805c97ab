"""The proxy bench's load: closed loops of small JSON or 1 MB posts, and sequential streams."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
from proxy_bench_wire import HEADERS, STREAM_LEN, STREAM_REQ

PHASES = ("c1", "c32", "stream", "paced", "upload")
PACED_GAP = 0.010  # each stream starts with the proxy idle (shorter than the writer's pause of 50 ms)


@dataclass
class Phase:
    latencies: list[float]  # seconds per request (total time for streams)
    elapsed: float
    errors: int
    ttfb: list[float] = field(default_factory=list)
    cpu: float | None = None  # proxy CPU seconds (all threads), including the post-phase drain
    loop_cpu: float | None = None  # of which the main thread (the event loop)
    child_cpu: float | None = None  # CPU seconds of the proxy's child processes (the capture writer)
    drain: float = 0.0  # seconds until the proxy went idle after the phase

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


_counter = iter(range(10**9))


async def post(session, url: str, body: bytes, kind: str) -> float | None:
    t0 = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={**HEADERS, "X-Bench-Kind": kind}) as r:
            await r.read()
            ok = r.status == 200
    except aiohttp.ClientError:
        return None
    return time.perf_counter() - t0 if ok else None


async def closed_loop(session, url: str, template: bytes, kind: str, concurrency: int, duration: float) -> Phase:
    lat: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration

    async def worker():
        nonlocal errors
        while time.perf_counter() < deadline:
            took = await post(session, url, template % next(_counter), kind)
            if took is None:
                errors += 1
            else:
                lat.append(took)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Phase(lat, time.perf_counter() - t0, errors)


async def streams(session, url: str, count: int, pause: float = 0.0) -> Phase:
    """Sequential streams; ``pause`` leaves a gap after each, as an agent's think time would."""
    lat, ttfb, errors = [], [], 0
    t_start = time.perf_counter()
    for _ in range(count):
        if pause and lat:
            await asyncio.sleep(pause)
        t0 = time.perf_counter()
        first, size = None, 0
        try:
            async with session.post(
                url, data=STREAM_REQ % next(_counter), headers={**HEADERS, "X-Bench-Kind": "stream"}
            ) as r:
                while chunk := await r.content.readany():
                    if first is None:
                        first = time.perf_counter()
                    size += len(chunk)
                ok = r.status == 200 and size == STREAM_LEN
        except aiohttp.ClientError:
            ok = False
        if ok:
            lat.append(time.perf_counter() - t0)
            ttfb.append(first - t0)
        else:
            errors += 1
    return Phase(lat, time.perf_counter() - t_start, errors, ttfb)
