"""Waiting for the writer to store captured calls.

The writer stores at the lowest CPU priority (docs/architecture.md, "The writer's supervisor"): on
a machine saturated by the rest of the suite it may wait many seconds for an idle moment, by design.
So a test waits for stored calls on a long deadline that costs nothing when they arrive early, and a
lost call still fails it, with the writer's counters in the message."""

from __future__ import annotations

import time
from pathlib import Path

STORE_WAIT = 90.0  # seconds; the idle-class writer gets no CPU while both cores are busy


def wait_for_stored(
    db_path: Path, n: int, session: str | None = None, timeout: float = STORE_WAIT, writer=None
) -> list[dict]:
    """The calls in ``db_path`` (of ``session``, if given) once there are at least ``n``, oldest first."""
    from ctxscope.inspector.store.queries import list_calls, open_db

    deadline = time.monotonic() + timeout
    rows: list[dict] = []
    while True:
        if db_path.exists():
            db = open_db(db_path)
            try:
                rows = list_calls(db, session=session, limit=None, newest_first=False)
            finally:
                db.close()
            if len(rows) >= n:
                return rows
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    stats = f"; writer: {writer.stats()}" if writer is not None else ""
    where = f" in session {session!r}" if session else ""
    raise AssertionError(f"expected {n} captured calls{where} within {timeout:.0f} s, found {len(rows)}{stats}")
