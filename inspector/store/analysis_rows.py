"""The analysis's reads and its one write: what it needs of stored calls, and its columns on a call row.

The analyzer (``inspector/pipeline/analyze.py``) runs inside the writer's transaction; these are the only
statements it issues, so its SQL stays in the store like every other statement.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from ctxscope.inspector.store import totals
from ctxscope.inspector.store.db import Db


def rowid_of(db: Db, call_id: str) -> int:
    return cast("int", db.execute("SELECT rowid FROM calls WHERE id = ?", [call_id]).fetchone()[0])


def write_analysis(db: Db, call_id: str, columns: dict[str, Any]) -> None:
    """The analysis's columns onto the call's row (one UPDATE)."""
    db.execute(f"UPDATE calls SET {', '.join(f'{k} = ?' for k in columns)} WHERE id = ?", [*columns.values(), call_id])


def sessions_of(db: Db, call_ids: list[str]) -> list[str]:
    """The sessions the calls ``call_ids`` are in."""
    out: set[str] = set()
    for start in range(0, len(call_ids), 500):
        part = call_ids[start : start + 500]
        marks = ", ".join("?" for _ in part)
        out.update(r[0] for r in db.execute(f"SELECT DISTINCT session FROM calls WHERE id IN ({marks})", part))
    return sorted(out)


def refresh_totals(db: Db, sessions: set[str]) -> None:
    """The sessions' totals counted again from their calls, after their analysis changed (store/totals.py)."""
    if totals.kept(db):
        totals.refresh(db, sessions)


Recent = tuple[str, str, str, int | None, str | None, str | None, str, str | None]


def latest_thread_calls(
    db: Db, session: str, key_fingerprint: str | None, before_rowid: int, limit: int
) -> list[Recent]:
    """(id, thread, started_at, capture_epoch, provider, api, session, upstream) of the scope's last
    successful calls stored before ``before_rowid``, newest first."""
    return db.execute(
        """SELECT id, thread, started_at, capture_epoch, provider, api, session, upstream FROM calls
           WHERE session = ? AND key_fingerprint IS ? AND rowid < ? AND thread IS NOT NULL
             AND outcome = 'ok' AND status < 400
           ORDER BY seq DESC LIMIT ?""",
        [session, key_fingerprint, before_rowid, limit],
    ).fetchall()


def latest_unnamed_calls(
    db: Db,
    key_fingerprint: str | None,
    client: str | None,
    grouped_by: tuple[str, ...],
    before_rowid: int,
    limit: int,
) -> list[Recent]:
    """The same for the calls without a session id (``grouped_by`` one of those given) of one API
    key and client, whatever their session."""
    marks = ", ".join("?" for _ in grouped_by)
    return db.execute(
        f"""SELECT id, thread, started_at, capture_epoch, provider, api, session, upstream FROM calls
            WHERE key_fingerprint IS ? AND client IS ? AND grouped_by IN ({marks}) AND rowid < ?
              AND thread IS NOT NULL AND outcome = 'ok' AND status < 400
            ORDER BY rowid DESC LIMIT ?""",
        [key_fingerprint, client, *grouped_by, before_rowid, limit],
    ).fetchall()


def producer_of(db: Db, response_id: str, not_call: str) -> tuple[str, str, str | None] | None:
    """(id, session, thread) of the latest other call whose response had ``response_id``."""
    return cast(
        "tuple[str, str, str | None] | None",
        db.execute(
            "SELECT id, session, thread FROM calls WHERE response_id = ? AND id != ? ORDER BY rowid DESC LIMIT 1",
            [response_id, not_call],
        ).fetchone(),
    )


def next_seq(db: Db, session: str) -> int:
    row = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM calls WHERE session = ?", [session]).fetchone()
    return cast("int", row[0])


def latest_same_request(
    db: Db,
    session: str,
    request_sha256: str,
    method: str | None,
    path: str | None,
    not_call: str,
    since: str | None,
    until: str | None,
) -> tuple[str, int | None, str | None, int | None, int | None] | None:
    """(id, attempt, outcome, status, response_complete) of the session's latest other call with the
    same request in the window."""
    return cast(
        "tuple[str, int | None, str | None, int | None, int | None] | None",
        db.execute(
            # idx_calls_started_at (time, hash): the window's entries, their hashes read from the index;
            # the unary + keeps the planner off the session's index, which would walk the whole session.
            """SELECT id, attempt, outcome, status, response_complete FROM calls
           WHERE +session = ? AND request_sha256 = ? AND method IS ? AND path IS ? AND id != ?
             AND started_at >= ? AND started_at <= ?
           ORDER BY started_at DESC LIMIT 1""",
            [session, request_sha256, method, path, not_call, since, until],
        ).fetchone(),
    )


def latest_unnamed_request(
    db: Db,
    key_fingerprint: str | None,
    client: str | None,
    grouped_by: tuple[str, ...],
    request_sha256: str,
    not_call: str,
    since: str | None,
    until: str | None,
) -> tuple[str, str | None, int | None, int | None, str, str | None] | None:
    """(id, outcome, status, response_complete, session, thread) of the latest other call without a
    session id of the key and client that sent the same request body in the window."""
    marks = ", ".join("?" for _ in grouped_by)
    return cast(
        "tuple[str, str | None, int | None, int | None, str, str | None] | None",
        db.execute(
            f"""SELECT id, outcome, status, response_complete, session, thread FROM calls
            WHERE +key_fingerprint IS ? AND +client IS ? AND grouped_by IN ({marks}) AND request_sha256 = ?
              AND id != ? AND started_at >= ? AND started_at <= ?
            ORDER BY started_at DESC LIMIT 1""",
            [key_fingerprint, client, *grouped_by, request_sha256, not_call, since, until],
        ).fetchone(),
    )


def call_ids(db: Db, session: str | None = None) -> list[str]:
    """Every call id (of ``session``), in the order they were stored."""
    where, params = ("WHERE session = ?", [session]) if session is not None else ("", [])
    return [r[0] for r in db.execute(f"SELECT id FROM calls {where} ORDER BY rowid", params).fetchall()]


def count_calls(db: Db, session: str | None = None) -> int:
    where, params = ("WHERE session = ?", [session]) if session is not None else ("", [])
    return cast("int", db.execute(f"SELECT COUNT(*) FROM calls {where}", params).fetchone()[0])


def count_analysed(db_path: str | Path, session: str) -> int:
    """Calls of the session stored and analysed so far, read without migrating or locking anything
    (sqlite3.Error when the file cannot be read)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
    try:
        return cast(
            "int",
            con.execute(
                "SELECT COUNT(*) FROM calls WHERE session = ? AND analysis_version IS NOT NULL", [session]
            ).fetchone()[0],
        )
    finally:
        con.close()


@contextmanager
def immediate(db: Db) -> Iterator[None]:
    """One write transaction, the lock taken at once (waiting out another writer); rolled back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise
