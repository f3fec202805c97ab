"""Requests that compute (a session's findings, the advisor's replay) run in a process of their own.

A findings or advise request on a large session took seconds to minutes and gigabytes; run in a
thread of the daemon, three such page loads went on after the browser had closed (5.1 GB), the
heap stayed at 1.3-1.6 GB afterwards, and the daemon had not exited 60 s after SIGTERM: a Python
thread cannot be stopped. So each runs in a child interpreter (``python -m
ctxscope.web.compute``) that reads the store itself and prints its answer as JSON: at most
MAX_RUNNING at once (the others wait their turn), its address space bounded by MEMORY_LIMIT, killed
when its client goes away (checked every POLL seconds: aiohttp does not cancel a handler whose
client left) or when the daemon stops (the handler is cancelled), and its memory goes back to the
system when it exits (docs/architecture.md, "Memory").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
from pathlib import Path
from typing import Any

MAX_RUNNING = 1  # computations at once: each may take a large share of memory
MEMORY_LIMIT = 4 << 30  # bytes of address space a computation may map (RLIMIT_AS)
POLL = 0.2  # seconds between looks at whether the client is still there
VIEWS = ("findings", "advice")


class ComputeFailed(RuntimeError):
    """The computation could not finish (out of memory, a defect): one line for the client."""


class Computations:
    """The daemon's running computations: bounded in number, each killed when no one waits for it."""

    def __init__(self, db_path: Path):
        self.db_path = db_path
        self._turns = asyncio.Semaphore(MAX_RUNNING)
        self._running: set[asyncio.subprocess.Process] = set()
        self._stopping = False
        self.killed = 0  # computations killed because their client left or the daemon stopped

    def stop(self) -> None:
        """The daemon stops: running computations are killed now (their clients get a 503), not
        after the shutdown grace, which is for provider calls; no new one starts."""
        self._stopping = True
        for proc in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def run(self, view: str, session: str, client_gone: Any) -> dict | None:
        """``view`` of ``session`` computed in a child; ``client_gone()`` says whether to give up."""
        async with self._turns:
            if self._stopping:
                raise ComputeFailed("the daemon is stopping")
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "ctxscope.web.compute",
                str(self.db_path),
                view,
                session,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            answer = asyncio.ensure_future(proc.communicate())
            self._running.add(proc)
            try:
                while not answer.done():
                    await asyncio.wait([answer], timeout=POLL)
                    if not answer.done() and client_gone():
                        raise asyncio.CancelledError
                out, err = answer.result()
            except BaseException:
                self.killed += 1
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                answer.cancel()
                raise
            finally:
                self._running.discard(proc)
        if self._stopping:
            raise ComputeFailed("the daemon is stopping")
        if proc.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            raise ComputeFailed(f"computing the {view} failed: {last[:300]}")
        return json.loads(out)


def _limit_memory() -> None:
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def main(argv: list[str]) -> int:
    """The child: ``DB VIEW SESSION`` -> the view as JSON on stdout (null for an unknown session)."""
    _limit_memory()
    db_path, view, session = argv
    if view not in VIEWS:
        print(f"unknown view {view!r}", file=sys.stderr)
        return 2
    from ctxscope.inspector.pipeline.search_text import SegmentTexts
    from ctxscope.inspector.store.queries import open_db
    from ctxscope.proxy.redaction.mask import mask_keys_in
    from ctxscope.web.advice import advice_view, findings_view

    db = open_db(db_path, segment_texts=SegmentTexts)
    try:
        result = (findings_view if view == "findings" else advice_view)(db, session)
    except MemoryError:
        print(f"out of memory (limit {MEMORY_LIMIT >> 20} MB)", file=sys.stderr)
        return 3
    finally:
        db.close()
    sys.stdout.write(json.dumps(mask_keys_in(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
