"""The OTLP export's reads and its one write: stored calls in storing order, and its position.

The export reads what the writer committed, in the order it was stored (``stored_order``), and
keeps how far it got per endpoint in ``export_positions`` (docs/architecture.md, "Export to
OpenTelemetry"). That row is the only thing it writes, on its own connection: never a call.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, cast

import sqlite_utils

from ctxscope.inspector.base.clock import now_iso
from ctxscope.inspector.store.columns import call_columns, verdict_sql

# Columns a span is made of (besides the verdict, read through verdict_sql).
_SPAN_COLUMNS = (
    "id",
    "session",
    "thread",
    "seq",
    "provider",
    "api",
    "model",
    "method",
    "path",
    "status",
    "outcome",
    "error",
    "stream",
    "started_at",
    "first_byte_at",
    "ended_at",
    "ttfb_ms",
    "duration_ms",
    "usage_input",
    "usage_output",
    "usage_cache_read",
    "usage_cache_write",
    "stop_reason",
    "relation",
    "pointer",
    "epoch_reason",
    "cache_lost_tokens",
    "markers",
    "grouped_by",
)


@dataclass(frozen=True)
class ExportLag:
    """How far one endpoint's export is behind the store."""

    target: str
    position: int  # the last stored_order.seq sent
    pending: int  # stored calls not sent yet
    updated_at: str | None  # when the position last moved
    oldest_pending_at: str | None  # started_at of the oldest call not sent yet


def _select(cols: frozenset[str]) -> str:
    names = [f"c.{c}" if c in cols else f"NULL AS {c}" for c in _SPAN_COLUMNS]
    verdict = verdict_sql(cols)
    names.append(
        f"{verdict.replace('cache_verdict', 'c.cache_verdict')} AS cache_verdict"
        if verdict
        else "NULL AS cache_verdict"
    )
    return ", ".join(names)


def has_export_tables(db: sqlite_utils.Database) -> bool:
    return {"stored_order", "export_positions"} <= set(db.table_names())


def end_seq(db: sqlite_utils.Database) -> int:
    """The newest stored call's number (0: none stored)."""
    return cast("int", db.execute("SELECT COALESCE(MAX(seq), 0) FROM stored_order").fetchone()[0])


def position(db: sqlite_utils.Database, target: str) -> int | None:
    """How far ``target`` has been sent; None when it never was."""
    row = db.execute("SELECT seq FROM export_positions WHERE target = ?", [target]).fetchone()
    return None if row is None else row[0]


def set_position(db: sqlite_utils.Database, target: str, seq: int) -> None:
    """Move ``target``'s position to ``seq`` (committed at once: a short write, never a call row)."""
    with db.conn:
        db.execute(
            """INSERT INTO export_positions (target, seq, updated_at) VALUES (?, ?, ?)
               ON CONFLICT(target) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at""",
            [target, seq, now_iso()],
        )


def calls_after(db: sqlite_utils.Database, seq: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
    """Up to ``limit`` stored calls after ``seq`` in storing order, as (seq, row)."""
    cur = db.execute(
        f"""SELECT o.seq, {_select(call_columns(db))} FROM stored_order o JOIN calls c ON c.id = o.call_id
            WHERE o.seq > ? ORDER BY o.seq LIMIT ?""",
        [seq, limit],
    )
    names = [d[0] for d in cur.description]
    return [(row[0], dict(zip(names[1:], row[1:], strict=True))) for row in cur.fetchall()]


def calls_for_backfill(
    db: sqlite_utils.Database, *, session: str | None, since: str | None, after: str, limit: int
) -> list[dict[str, Any]]:
    """Stored calls in id order after call id ``after`` (""), of one session and from ``since`` (ISO) when given."""
    where, args = ["c.id > ?"], [after]
    if session is not None:
        where.append("c.session = ?")
        args.append(session)
    if since is not None:
        where.append("c.started_at >= ?")
        args.append(since)
    cur = db.execute(
        f"SELECT {_select(call_columns(db))} FROM calls c WHERE {' AND '.join(where)} ORDER BY c.id LIMIT ?",
        [*args, limit],
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def count_for_backfill(db: sqlite_utils.Database, *, session: str | None, since: str | None) -> int:
    where, args = ["1"], []
    if session is not None:
        where.append("session = ?")
        args.append(session)
    if since is not None:
        where.append("started_at >= ?")
        args.append(since)
    return cast("int", db.execute(f"SELECT COUNT(*) FROM calls WHERE {' AND '.join(where)}", args).fetchone()[0])


def export_lags(db: sqlite_utils.Database) -> list[ExportLag]:
    """Every endpoint's position and what waits behind it; none in a file older than the export tables."""
    try:
        targets = db.execute("SELECT target, seq, updated_at FROM export_positions ORDER BY target").fetchall()
    except sqlite3.OperationalError:
        return []
    lags = []
    for target, seq, updated_at in targets:
        pending, oldest = db.execute(
            """SELECT COUNT(*), MIN(c.started_at) FROM stored_order o JOIN calls c ON c.id = o.call_id
               WHERE o.seq > ?""",
            [seq],
        ).fetchone()
        lags.append(ExportLag(target, seq, pending, updated_at, oldest))
    return lags
