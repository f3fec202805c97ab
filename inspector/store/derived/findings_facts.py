"""The findings facts in the store: one JSON row per call (``advisor/call_facts.py``), read per
session in order with no body (docs/architecture.md, "Findings")."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from ctxscope.inspector.store.db import Db


@dataclass(frozen=True)
class FactsRow:
    """A call of the session and its stored facts (None: not taken yet)."""

    call_id: str
    seq: int
    thread: str | None
    started_at: str | None
    key_fingerprint: str | None
    facts: str | None
    provider: str | None = None
    cache: str | None = None  # the analysis' cache JSON: the call's stored loss


def save(db: Db, call_id: str, facts: str) -> None:
    """The writer's facts of a call it stores (replacing those of an earlier attempt at its batch)."""
    db.execute("INSERT OR REPLACE INTO call_findings (call_id, facts) VALUES (?, ?)", [call_id, facts])


def replace_session(db: Db, rows: Iterable[tuple[str, str]]) -> None:
    """Facts a reader took again from a session's bodies (stored before the table, or regrouped)."""
    db.conn.executemany("INSERT OR REPLACE INTO call_findings (call_id, facts) VALUES (?, ?)", list(rows))


def session_rows(db: Db, session: str) -> list[FactsRow]:
    """Every call of ``session`` (an exact id) by seq, with its facts."""
    try:
        found = db.execute(
            """SELECT c.id, c.seq, c.thread, c.started_at, c.key_fingerprint, f.facts, c.provider, c.cache
               FROM calls c LEFT JOIN call_findings f ON f.call_id = c.id
               WHERE c.session = ? ORDER BY c.seq""",
            [session],
        ).fetchall()
    except sqlite3.OperationalError:  # a file older than the table, opened without migrating
        found = db.execute(
            """SELECT id, seq, thread, started_at, key_fingerprint, NULL, provider, cache FROM calls
               WHERE session = ? ORDER BY seq""",
            [session],
        ).fetchall()
    return [FactsRow(*row) for row in found]


def previous_in_thread(db: Db, session: str, thread: str, before_seq: int) -> tuple[str, str] | None:
    """The latest call of the thread before ``before_seq`` that has facts (not skipped): (id, facts)."""
    row = db.execute(
        """SELECT c.id, f.facts FROM calls c JOIN call_findings f ON f.call_id = c.id
           WHERE c.session = ? AND c.thread = ? AND c.seq < ? AND f.facts NOT LIKE '%"skip":true%'
           ORDER BY c.seq DESC LIMIT 1""",
        [session, thread, before_seq],
    ).fetchone()
    return (row[0], row[1]) if row else None
