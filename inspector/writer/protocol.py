"""The one writer interface the daemon, the proxy's recorder and the web UI hold.

Two classes implement it: ``CaptureWriter`` (a thread of this process) and ``WriterProcess`` (a
low-priority child process). Whatever writes to the store goes through it, so the store has one
writer (docs/architecture.md, "One writer").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ctxscope.inspector.writer.status import WriterStats
from ctxscope.proxy.exchange import Exchange

RETRY_INTERVAL = 2.0  # seconds between attempts to store while the store is unavailable (both writers)
IDLE_RELEASE = 60.0  # seconds of silence, everything stored, before the child lets go of its caches


class WriterUnavailable(RuntimeError):
    """The writer cannot do what was asked now: it is not running, or its store is unavailable."""


class Writer(Protocol):
    """Stores captured exchanges and serves the few other writes the UI asks for."""

    db_path: Path
    capture_epoch: int | None
    on_stored: Callable[[], None] | None  # called (from any thread) once newly stored calls are committed

    def start(self) -> None:
        """Start storing; a store that cannot be opened is reported and retried, not raised."""

    def submit(self, exchange: Exchange) -> None:
        """Queue an exchange for storage; never blocks, never raises."""

    def stats(self) -> WriterStats:
        """Live counters (queued, written, failures, whether it runs)."""

    def delete_session(self, session: str, timeout: float = 30.0) -> dict:
        """Delete a session's calls and the bodies nothing else needs, in the writer's order.

        Blocks until done: ``{"session", "calls_deleted", "blobs_deleted"}``. Raises
        ``WriterUnavailable`` when the writer does not run or the store fails."""

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop accepting, store everything queued; True when nothing was left unstored."""
