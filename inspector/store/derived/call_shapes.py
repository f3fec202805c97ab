"""The prompt shapes in the store: one JSON row per call (``advisor/shape.py``), read per session
in order with no body (docs/architecture.md, "The cache advisor")."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ctxscope.inspector.store.db import Db


def save(db: Db, call_id: str, shape: str) -> None:
    """The writer's shape of a call it stores (replacing that of an earlier attempt at its batch)."""
    db.execute("INSERT OR REPLACE INTO call_shapes (call_id, shape) VALUES (?, ?)", [call_id, shape])


def replace_session(db: Db, rows: Iterable[tuple[str, str]]) -> None:
    """Shapes a reader took again from a session's bodies (stored before the table)."""
    db.conn.executemany("INSERT OR REPLACE INTO call_shapes (call_id, shape) VALUES (?, ?)", list(rows))


def session_shapes(db: Db, session: str) -> dict[str, str] | None:
    """Call id -> stored shape for the calls of ``session`` that have one; None on a file older
    than the table (opened without migrating)."""
    try:
        found = db.execute(
            "SELECT c.id, s.shape FROM calls c JOIN call_shapes s ON s.call_id = c.id WHERE c.session = ?",
            [session],
        ).fetchall()
    except sqlite3.OperationalError:
        return None
    return dict(found)
