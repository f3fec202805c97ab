"""Session titles in the store: one row per session, written as its first calls are stored, so no
read opens a body to name a session (docs/architecture.md, "Totals per session").

The store knows rows, not prompts: the rule that takes a title from a prompt is the pipeline's
(``inspector/pipeline/session_titles.py``), which writes through these functions. ``tried`` counts
the calls looked at: a session whose first ``CALLS_TRIED`` calls held no user message keeps a NULL
title and is not looked at again. A store migrated to the table (m021) is marked ``PENDING`` until
the pipeline's backfill has named the sessions stored before it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

PENDING = "session_titles_backfill"  # meta key: set by m021, deleted once the backfill is done
_PER_QUERY = 500

CREATE = """
CREATE TABLE session_titles (
  session TEXT PRIMARY KEY,       -- the session's id, as calls.session
  title TEXT,                     -- NULL: none of the calls looked at held a user message
  tried INTEGER NOT NULL          -- calls looked at so far (the first few of the session)
) WITHOUT ROWID"""


def kept(db: Db) -> bool:
    """Whether the file has the table (a file opened without migrating may be older)."""
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'session_titles'").fetchone()
    return found is not None


def state(db: Db, session: str) -> tuple[str | None, int] | None:
    """(title, calls tried) of ``session``; None when none of its calls was looked at yet."""
    row = db.execute("SELECT title, tried FROM session_titles WHERE session = ?", [session]).fetchone()
    return None if row is None else (row[0], row[1])


def save(db: Db, session: str, title: str | None, tried: int) -> None:
    """One statement: the writer's single write for a call it looked at."""
    db.execute(
        "INSERT OR REPLACE INTO session_titles (session, title, tried) VALUES (?, ?, ?)", [session, title, tried]
    )


def forget(db: Db, sessions: Iterable[str]) -> None:
    """Drop the rows of ``sessions`` (deleted, or to be named again after a reindex)."""
    names = sorted(set(sessions))
    for start in range(0, len(names), _PER_QUERY):
        part = names[start : start + _PER_QUERY]
        db.execute(f"DELETE FROM session_titles WHERE session IN ({', '.join('?' for _ in part)})", part)


def of(db: Db, sessions: Sequence[str]) -> dict[str, str | None]:
    """The stored title of each of ``sessions`` (None: none, or not stored); a few indexed reads."""
    out: dict[str, str | None] = dict.fromkeys(sessions)
    names = sorted(set(sessions))
    try:
        for start in range(0, len(names), _PER_QUERY):
            part = names[start : start + _PER_QUERY]
            marks = ", ".join("?" for _ in part)
            for session, title in db.execute(
                f"SELECT session, title FROM session_titles WHERE session IN ({marks})", part
            ).fetchall():
                out[session] = title
    except sqlite3.OperationalError:  # a file older than the table, opened without migrating: no titles
        pass
    return out


def title(db: Db, session: str) -> str | None:
    """The stored title of one session."""
    return of(db, [session])[session]


def pending(db: Db) -> bool:
    """Whether sessions stored before the table still wait for the backfill."""
    try:
        return db.execute("SELECT 1 FROM meta WHERE key = ?", [PENDING]).fetchone() is not None
    except sqlite3.OperationalError:
        return False


def done(db: Db) -> None:
    db.execute("DELETE FROM meta WHERE key = ?", [PENDING])


def untitled(db: Db, after: str, limit: int) -> list[str]:
    """Up to ``limit`` sessions after ``after`` (in id order) that have calls but no row yet."""
    found = db.execute(
        """SELECT DISTINCT t.session FROM call_totals t
           WHERE t.session > ? AND NOT EXISTS (SELECT 1 FROM session_titles s WHERE s.session = t.session)
           ORDER BY t.session LIMIT ?""",
        [after, limit],
    ).fetchall()
    return [s for (s,) in found]


def count_untitled(db: Db) -> int:
    found = db.execute(
        """SELECT count(DISTINCT t.session) FROM call_totals t
           WHERE NOT EXISTS (SELECT 1 FROM session_titles s WHERE s.session = t.session)"""
    ).fetchone()
    return int(found[0])


def first_calls(db: Db, session: str, limit: int) -> list[tuple[str, str | None, str | None]]:
    """(id, api, grouped_by) of the session's first ``limit`` calls by time (the rule's candidates)."""
    return [
        (r[0], r[1], r[2])
        for r in db.execute(
            "SELECT id, api, grouped_by FROM calls WHERE session = ? ORDER BY started_at, seq, id LIMIT ?",
            [session, limit],
        ).fetchall()
    ]
