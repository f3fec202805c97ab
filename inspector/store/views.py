"""The web UI's reads of the call index: neighbours, diff bases, new rows, session columns, totals, usage.

Each is an index lookup or an aggregate over ``calls`` (never over bodies), so a page stays fast
on a large capture file. The UI shapes the rows; the SQL stays here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

import sqlite_utils

from ctxscope.inspector.store import totals
from ctxscope.inspector.store.columns import call_columns, verdict_sql
from ctxscope.inspector.store.queries import SUMMARY_COLUMNS
from ctxscope.inspector.store.sessions import PURPOSE_SQL
from ctxscope.vocab.apis import SIMULATOR_PROVIDER


def neighbours(db: sqlite_utils.Database, session: str, seq: int) -> tuple[str | None, str | None]:
    """The ids of the calls just before and after ``seq`` in its session."""
    prev = db.execute(
        "SELECT id FROM calls WHERE session = ? AND seq < ? ORDER BY seq DESC LIMIT 1", [session, seq]
    ).fetchone()
    nxt = db.execute(
        "SELECT id FROM calls WHERE session = ? AND seq > ? ORDER BY seq LIMIT 1", [session, seq]
    ).fetchone()
    return (prev[0] if prev else None, nxt[0] if nxt else None)


def diff_base(db: sqlite_utils.Database, call_id: str) -> str | None:
    """The call's predecessor (analysis) when it is still stored, else the previous call of its session."""
    if "predecessor" in call_columns(db):
        row = db.execute(
            "SELECT p.id FROM calls c JOIN calls p ON p.id = c.predecessor WHERE c.id = ?", [call_id]
        ).fetchone()  # the join skips a predecessor that was deleted since
        if row:
            return cast("str | None", row[0])
    row = db.execute(
        """SELECT p.id FROM calls c JOIN calls p ON p.session = c.session AND p.seq < c.seq
           WHERE c.id = ? ORDER BY p.seq DESC LIMIT 1""",
        [call_id],
    ).fetchone()
    return row[0] if row else None


def predecessor_or_previous(db: sqlite_utils.Database, call_id: str) -> str | None:
    """A call's recorded predecessor, else (not yet analysed) the previous call of its session."""
    row = db.execute("SELECT predecessor, session, seq FROM calls WHERE id = ?", [call_id]).fetchone()
    if row is None:
        return None
    if row[0]:
        return cast("str | None", row[0])
    prev = db.execute(
        "SELECT id FROM calls WHERE session = ? AND seq < ? ORDER BY seq DESC LIMIT 1", [row[1], row[2]]
    ).fetchone()
    return prev[0] if prev else None


def max_rowid(db: sqlite_utils.Database) -> int:
    return cast("int", db.execute("SELECT COALESCE(MAX(rowid), 0) FROM calls").fetchone()[0])


def calls_after(db: sqlite_utils.Database, after: int, limit: int) -> list[dict[str, Any]]:
    """Summary rows (with ``rowid``) of the calls stored after rowid ``after``, oldest first."""
    rows = db.execute(
        f"SELECT rowid, {SUMMARY_COLUMNS} FROM calls WHERE rowid > ? ORDER BY rowid LIMIT ?", [after, limit]
    )
    names = [d[0] for d in rows.description]
    return [dict(zip(names, r, strict=True)) for r in rows.fetchall()]


def store_totals(db: sqlite_utils.Database) -> dict[str, Any]:
    n, sessions, last = db.execute(
        f"SELECT COALESCE(SUM(calls), 0), COUNT(DISTINCT session), MAX(last_started_at) FROM {totals.source(db)}"
    ).fetchone()
    return {"calls": n, "sessions": sessions, "last_capture_at": last}


def session_columns(db: sqlite_utils.Database, session: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """``names`` (those the store has) and ``verdict`` of every call of the session, in time order."""
    cols = call_columns(db)
    names = [n for n in names if n in cols]
    select = ", ".join(names)
    verdict = verdict_sql(cols)
    if verdict:
        select += f", {verdict}"
        names.append("verdict")
    cur = db.execute(f"SELECT {select} FROM calls WHERE session = ? ORDER BY started_at, seq, id", [session])
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def call_values(db: sqlite_utils.Database, ids: Sequence[str], names: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``names`` of the calls ``ids``, by id."""
    marks = ", ".join("?" for _ in ids)
    rows = db.execute(f"SELECT id, {', '.join(names)} FROM calls WHERE id IN ({marks})", list(ids))
    return {r[0]: tuple(r[1:]) for r in rows}


def client_counts(db: sqlite_utils.Database, sessions: Iterable[str]) -> list[tuple[str, str | None, int]]:
    """(session, user agent, calls) of the given sessions."""
    sessions = list(sessions)
    marks = ",".join("?" for _ in sessions)
    return db.execute(
        f"SELECT session, client, SUM(calls) FROM {totals.source(db)} WHERE session IN ({marks})"
        " GROUP BY session, client",
        sessions,
    ).fetchall()


def thread_groups(db: sqlite_utils.Database, sessions: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """(session, thread) per thread of the given sessions: its parent, calls, first seq, last time,
    models and usage, in order of first call; empty when the store has no thread column."""
    cols = call_columns(db)
    if "thread" not in cols:
        return []
    sessions = list(sessions)
    marks = ",".join("?" for _ in sessions)
    rows = db.execute(  # from the sessions' totals (store/totals.py): a few rows each, whatever their calls
        f"""SELECT session, thread, MAX(parent_thread), SUM(calls), MIN(first_seq), MAX(last_started_at),
                   json_group_array(DISTINCT model), SUM(usage_input), SUM(usage_cache_read),
                   COALESCE(SUM(tool_rounds), 0), COALESCE(MAX(subagent), 0)
            FROM {totals.source(db)} WHERE session IN ({marks}) AND thread IS NOT NULL
            GROUP BY session, thread ORDER BY MIN(first_seq)""",
        sessions,
    ).fetchall()
    return [
        (
            session,
            {
                "thread": thread,
                "parent_thread": parent_thread if parent_thread != thread else None,
                "calls": n,
                "first_seq": first_seq,
                "last_started_at": last,
                "models": sorted(m for m in json.loads(models) if m),
                "usage_input": inp,
                "usage_cache_read": read,
                "tool_rounds": rounds or 0,
                "subagent": bool(declared),
            },
        )
        for session, thread, parent_thread, n, first_seq, last, models, inp, read, rounds, declared in rows
    ]


def usage_groups(db: sqlite_utils.Database, *, since: str | None = None) -> list[tuple[Any, ...]]:
    """Usage per (UTC day, model, session, simulated or not) of the calls started at or after
    ``since`` (ISO text), leaving out the sessions the project made itself: the usage page's bars
    and the sessions behind each. (day, model, session, simulated, calls, input, output, cache read,
    cache write), oldest day first."""
    where = f"WHERE NOT ({PURPOSE_SQL})" + (" AND started_at >= ?" if since else "")
    return db.execute(
        f"""SELECT substr(started_at, 1, 10), model, session, provider IS '{SIMULATOR_PROVIDER}', COUNT(*),
                   SUM(usage_input), SUM(usage_output), SUM(usage_cache_read), SUM(usage_cache_write)
            FROM calls {where}
            GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3""",
        [since] if since else [],
    ).fetchall()
