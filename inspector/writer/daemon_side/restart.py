"""Starting a new capture writer child after one died, without a crash loop and without guessing.

When: at once after a child that had run a while; after a doubling delay (FIRST_BACKOFF up to
RESTART_BACKOFF) after children that died young, so a child that dies on every call cannot make
the proxy spawn processes flat out; RESTART_BACKOFF after one that would not start at all.

What was lost: a new child first takes over the spools of dead writers and says which calls it
found; the calls sent to the dead child that it did not find died in the pipe. The counters of
every child's life are added up, so a restart never resets what ``db status`` shows.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import time

from ctxscope.inspector.writer.daemon_side.launch import ChildProcess
from ctxscope.inspector.writer.status import WriterStats
from ctxscope.inspector.writer.wire.messages import Failed, FromChild, Ready, Recovered

log = logging.getLogger("ctxscope.store")

RESTART_BACKOFF = 30.0  # seconds between attempts to start a new child when one will not start
QUICK_DEATH = 30.0  # a child that dies younger than this may die again: wait before the next one
FIRST_BACKOFF = 0.5  # ... 0.5 s after the first quick death, doubling up to RESTART_BACKOFF

_TALLIES = (
    "written",
    "failed",
    "dropped",
    "analysis_failed",
    "parse_failed",
    "commits",
    "already_stored",
    "store_failures",
    "spools_quarantined",
    "spool_records_torn",
    "spool_failures",
    "dropped_spool_full",
    "idle_releases",
)


class RestartPolicy:
    """When the next child may be started (``due``), from when children started and died."""

    def __init__(self) -> None:
        self.next_at = 0.0
        self._started_at = 0.0  # when the current child was ready
        self._quick_deaths = 0  # children in a row that died soon after they started

    def started(self, now: float) -> None:
        self._started_at = now

    def died(self, now: float) -> None:
        self._quick_deaths = self._quick_deaths + 1 if now - self._started_at < QUICK_DEATH else 0
        if self._quick_deaths:
            delay = min(RESTART_BACKOFF, FIRST_BACKOFF * 2 ** (self._quick_deaths - 1))
            self.next_at = max(self.next_at, now + delay)

    def failed_to_start(self, now: float) -> None:
        self.next_at = now + RESTART_BACKOFF

    def due(self, now: float) -> bool:
        return now >= self.next_at


def add_lives(a: WriterStats, b: WriterStats) -> WriterStats:
    """Counters of two children's lives added up (the newer one's last error wins)."""
    return dataclasses.replace(
        b, **{k: getattr(a, k) + getattr(b, k) for k in _TALLIES}, last_error=b.last_error or a.last_error
    )


def child_reply(replies: queue.Queue[FromChild], proc: ChildProcess, timeout: float) -> FromChild:
    """The next reply of a child that may die while it is awaited: ``Failed`` if it died or
    stayed silent for ``timeout`` (a dying child's last words may still be on their way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return replies.get(timeout=0.1)
        except queue.Empty:
            if proc.is_alive() and time.monotonic() < deadline:
                continue
        try:
            return replies.get(timeout=0.5)
        except queue.Empty:
            return Failed("timed out" if proc.is_alive() else f"exited with code {proc.exitcode}")


def await_ready(proc: ChildProcess, timeout: float) -> Ready:
    """A just-started child's ``Ready``; RuntimeError if it failed, died or said something else
    first (it is then reaped). A child that dies starting costs no timeout."""
    reply = child_reply(proc.replies, proc, timeout)
    if isinstance(reply, Ready):
        return reply
    proc.join(5)
    if proc.is_alive():
        proc.kill()
    proc.close()
    why = reply.error if isinstance(reply, Failed) else f"it said {type(reply).__name__} first"
    raise RuntimeError(f"capture writer could not start: {why}")


def recovered_ids(replies: queue.Queue[FromChild], proc: ChildProcess, timeout: float) -> set[str] | None:
    """The ids of the calls a just-started child found in spools left by dead writers; None if
    it died (or went silent) before saying."""
    reply = child_reply(replies, proc, timeout)
    if not isinstance(reply, Recovered):
        log.error(
            "the new capture writer did not say what it recovered: %s",
            reply.error if isinstance(reply, Failed) else f"it said {type(reply).__name__} first",
        )
        return None
    return set(reply.ids)
