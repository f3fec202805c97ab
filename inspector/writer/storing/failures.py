"""The capture writer's failures, kept and reported so that none is silent and no call is lost.

An unavailable store (it cannot be opened, the disk is full, an I/O error, a corrupt file) is told
apart from one call that cannot be stored: the first keeps every call and is retried, the second
gives that call up. An outage is logged at once, then every REMIND_INTERVAL, and recorded in
``store_events`` by the first commit that works again. Failures and drops that cannot be recorded
yet wait in memory (at most MAX_PENDING_EVENTS: a dead disk must not grow memory forever).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from ctxscope.inspector.base.clock import now_iso
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.db import Db
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

REMIND_INTERVAL = 60.0  # an outage is logged at once, then again this often
MAX_PENDING_EVENTS = 1000


def store_unavailable(e: BaseException) -> bool:
    """Whether an error says the store as a whole cannot be written now (retry later, keep the
    calls) rather than that one exchange cannot be stored."""
    return isinstance(e, (sqlite3.OperationalError, OSError)) or type(e) is sqlite3.DatabaseError


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def call_event(kind: str, ex: Exchange, detail: str) -> dict:
    return {"kind": kind, "call_id": ex.id, "detail": detail, "at": now_iso()}


class Outage:
    """The store's current outage, from its first failed attempt until a write works again."""

    def __init__(self, db_path: Path, retry_interval: float):
        self.db_path = db_path
        self.retry_interval = retry_interval
        self.failures = 0  # failed attempts to open or write the store, over the writer's life
        self.since: str | None = None  # when the current outage began; None while storing works
        self._count = 0  # failed attempts in the current outage
        self._reminded = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, error: str, waiting: int, *, opening: bool = False) -> None:
        """Count a failed attempt and say it: at once, then every REMIND_INTERVAL."""
        self.failures += 1
        self._count += 1
        now = time.monotonic()
        if self.since is None:
            self.since = now_iso()
            self._reminded = now
            log.error(
                "capture store %s unavailable%s: %s. Forwarding goes on; captured calls wait (%d now) and "
                "storing is retried every %g s",
                self.db_path,
                " (cannot open it)" if opening else "",
                error,
                waiting,
                self.retry_interval,
            )
        elif now - self._reminded >= REMIND_INTERVAL:
            self._reminded = now
            log.error(
                "capture store %s still unavailable since %s (%d failed attempts): %s; %d calls wait",
                self.db_path,
                self.since,
                self._count,
                error,
                waiting,
            )

    def events(self, last_error: str | None) -> list[dict]:
        """The event that records the current outage (none while the store works)."""
        if self.since is None:
            return []
        return [
            {"kind": "store_unavailable", "call_id": None, "detail": last_error, "at": self.since, "count": self._count}
        ]

    def ended(self) -> None:
        """A write worked after the outage (and recorded it): say so."""
        log.warning(
            "capture store %s works again after %d failed attempts since %s; storing the calls that waited",
            self.db_path,
            self._count,
            self.since,
        )
        self.since = None
        self._count = 0


class Unrecorded:
    """Failures and drops not recorded in ``store_events`` yet."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.drops_recorded = 0  # of the writer's drop count, how many are recorded

    def add(self, event: dict) -> None:
        self.events.append(event)
        del self.events[:-MAX_PENDING_EVENTS]

    def recorded(self, n_events: int, drops: int) -> None:
        """The first ``n_events`` and ``drops`` more drops were committed."""
        del self.events[:n_events]
        self.drops_recorded += drops

    def flush(self, db: Db, dropped: int, last_error: str | None) -> None:
        """Record them in their own transaction (best effort)."""
        pending = list(self.events)
        drops = dropped - self.drops_recorded
        if not pending and not drops:
            return
        try:
            with db.atomic():
                record(db, pending, drops, last_error)
        except Exception as e:
            log.error("could not record capture failures in the database: %s", describe(e))
            return
        self.recorded(len(pending), drops)


def record(db: Db, events: list[dict], drops: int, last_error: str | None) -> None:
    """Write events (and a count of dropped calls) into ``store_events``, in the caller's transaction."""
    for ev in events:
        store.record_event(
            db, ev["kind"], call_id=ev["call_id"], detail=ev["detail"], at=ev["at"], count=ev.get("count", 1)
        )
    if drops:
        store.record_event(db, "dropped", count=drops, detail=last_error)
