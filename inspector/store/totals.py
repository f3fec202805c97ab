"""Per-session totals of the calls, kept by the writer, so whole-store reads never scan ``calls``.

``call_totals`` holds one row per group of calls that share every value a list or a statistic
splits by (session, thread, model, provider, client, relation, epoch reason, cache verdict, break
kind and area, provider agreement, compaction, inside the cached prefix) with the sums, counts and
extremes of the rest. A session has a handful of groups, so the sessions list, ``stats`` and
``db status`` read a few rows per session however many calls it has (docs/architecture.md, "Totals
per session").

Each column is defined once here (``_COLUMNS``) and gives three statements: the writer's upsert of
one call it has just inserted (in the call's transaction, ``add_call``), the rebuild of some
sessions from ``calls`` (``refresh``: after a deletion or a re-analysis, and the migration's
backfill), and the same GROUP BY as a subquery (``source``) for a file opened without migrating.
Sums keep SQL's rule: NULL while every part is NULL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import MarkerKind

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

Combine = Literal["key", "count", "sum", "min", "max"]

# A call that ran tools since its predecessor, a sub-agent's call: as store/sessions.py spells them
# (not imported: sessions.py reads this table).
_TOOL_ROUND = f"""(instr(COALESCE(markers, ''), '"kind":"{MarkerKind.TOOLS_EXECUTED}"') > 0)"""
_SUBAGENT = f"""(instr(COALESCE(annotations, ''), '"{Annotation.SUBAGENT}"') > 0)"""
_VERDICT = (
    "(CASE WHEN json_valid(cache_verdict) AND json_type(cache_verdict) = 'object' "
    "THEN json_extract(cache_verdict, '$.verdict') ELSE cache_verdict END)"
)
_BREAK_POINTER = "ltrim(json_extract(cache, '$.break_pointer'), '/')"


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # SQL type
    per_call: str  # the value of one call, over a row of ``calls``
    combine: Combine
    needs: tuple[str, ...] = ()  # the calls columns it reads: NULL on a file without them


_COLUMNS: tuple[Column, ...] = (
    Column("session", "TEXT NOT NULL", "session", "key"),
    Column("thread", "TEXT", "thread", "key", ("thread",)),
    Column("model", "TEXT", "model", "key"),
    Column("provider", "TEXT", "provider", "key"),
    Column("client", "TEXT", "client", "key"),
    Column("relation", "TEXT", "relation", "key", ("relation",)),
    Column("epoch_reason", "TEXT", "epoch_reason", "key", ("epoch_reason",)),
    Column("verdict", "TEXT", _VERDICT, "key", ("cache_verdict",)),
    Column(
        "break_kind",
        "TEXT",
        f"(CASE WHEN {_VERDICT} = 'client_break' THEN json_extract(cache, '$.break_segment_kind') END)",
        "key",
        ("cache_verdict", "cache"),
    ),
    Column(  # the top-level part of the break's pointer: /system, /tools, /messages ...
        "break_area",
        "TEXT",
        f"""(CASE WHEN {_VERDICT} = 'client_break' AND COALESCE({_BREAK_POINTER}, '') != ''
                  THEN '/' || CASE WHEN instr({_BREAK_POINTER}, '/') > 0
                                   THEN substr({_BREAK_POINTER}, 1, instr({_BREAK_POINTER}, '/') - 1)
                                   ELSE {_BREAK_POINTER} END
                  WHEN {_VERDICT} = 'client_break' AND json_extract(cache, '$.break_pointer') != ''
                  THEN '/' END)""",
        "key",
        ("cache_verdict", "cache"),
    ),
    Column(
        "agreement",
        "TEXT",
        "(CASE WHEN cache IS NOT NULL THEN COALESCE(json_extract(cache, '$.provider_agreement'), 'none') END)",
        "key",
        ("cache",),
    ),
    Column(  # a compaction's checkpoint request or the first call after it
        "compaction",
        "INTEGER",
        f"""(has_compaction_before = 1 OR instr(markers, '"kind":"{MarkerKind.CHECKPOINT_REQUEST}"') > 0)""",
        "key",
        ("has_compaction_before", "markers"),
    ),
    Column(  # the break lies behind the previous call's last cache breakpoint
        "inside",
        "INTEGER",
        "(json_extract(cache, '$.before_prev_last_breakpoint') = 1)",
        "key",
        ("cache",),
    ),
    Column("calls", "INTEGER NOT NULL", "1", "count"),
    Column("first_started_at", "TEXT", "started_at", "min"),
    Column("last_started_at", "TEXT", "started_at", "max"),
    Column("first_seq", "INTEGER", "seq", "min"),
    Column("usage_input", "INTEGER", "usage_input", "sum"),
    Column("usage_output", "INTEGER", "usage_output", "sum"),
    Column("usage_cache_read", "INTEGER", "usage_cache_read", "sum"),
    Column("usage_cache_write", "INTEGER", "usage_cache_write", "sum"),
    Column("reported", "INTEGER", "(usage_input IS NOT NULL)", "sum"),
    Column("errors", "INTEGER", "(outcome != 'ok' OR status >= 400)", "sum"),
    Column("compactions", "INTEGER", "has_compaction_before", "sum", ("has_compaction_before",)),
    Column("tokens_estimated", "INTEGER", "tokens_estimated", "sum", ("tokens_estimated",)),
    Column("lost_tokens", "INTEGER", "cache_lost_tokens", "sum", ("cache_lost_tokens",)),
    Column("lost_usd", "REAL", "cache_lost_usd", "sum", ("cache_lost_usd",)),
    Column("tool_rounds", "INTEGER", _TOOL_ROUND, "sum", ("markers",)),
    Column("subagent", "INTEGER", _SUBAGENT, "max", ("annotations",)),
    Column("session_source", "TEXT", "session_source", "max", ("session_source",)),
    Column("parent_thread", "TEXT", "parent_thread", "max", ("parent_thread",)),
    Column("request_bytes", "INTEGER", "request_bytes", "sum"),
    Column("response_bytes", "INTEGER", "response_bytes", "sum"),
)
KEYS = tuple(c.name for c in _COLUMNS if c.combine == "key")
NAMES = tuple(c.name for c in _COLUMNS)


def _value(c: Column, cols: frozenset[str] | None) -> str:
    return c.per_call if cols is None or set(c.needs) <= cols else "NULL"


def _aggregate(c: Column, cols: frozenset[str] | None) -> str:
    v = _value(c, cols)
    return {"key": v, "count": "COUNT(*)", "sum": f"SUM({v})", "min": f"MIN({v})", "max": f"MAX({v})"}[c.combine]


def _group_key(cols: frozenset[str] | None) -> str:
    return f"json_array({', '.join(_value(c, cols) for c in _COLUMNS if c.combine == 'key')})"


def _grouped(where: str, cols: frozenset[str] | None = None) -> str:
    """One row per group of the calls ``where`` selects, as the table holds them."""
    return (
        f"SELECT {_group_key(cols)} AS grp, {', '.join(f'{_aggregate(c, cols)} AS {c.name}' for c in _COLUMNS)}"
        f" FROM calls {where} GROUP BY grp"
    )


def _merge(c: Column) -> str:
    old, new = f"call_totals.{c.name}", f"excluded.{c.name}"
    if c.combine == "count":
        return f"{old} + {new}"
    if c.combine == "sum":
        return f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {old} + {new} END"
    better = "<" if c.combine == "min" else ">"
    return f"CASE WHEN {old} IS NULL OR {new} {better} {old} THEN {new} ELSE {old} END"


CREATE = f"""
CREATE TABLE call_totals (
  grp TEXT PRIMARY KEY,           -- json_array of the key columns (session ... inside): one group of calls
  {("," + chr(10) + "  ").join(f"{c.name} {c.kind}" for c in _COLUMNS)}
) WITHOUT ROWID"""

_ADD = (
    f"INSERT INTO call_totals (grp, {', '.join(NAMES)})"
    f" SELECT {_group_key(None)}, {', '.join(c.per_call for c in _COLUMNS)} FROM calls WHERE rowid = ?"
    f" ON CONFLICT (grp) DO UPDATE SET " + ", ".join(f"{c.name} = {_merge(c)}" for c in _COLUMNS if c.combine != "key")
)


def create(db: Db) -> None:
    """The table, its session index and every stored call counted in it (the migration); and the
    index of a session's calls by time."""
    db.execute(CREATE)
    db.execute("CREATE INDEX idx_call_totals_session ON call_totals (session)")
    # A session's first or last calls by time (its title, its newest calls) without sorting all of them.
    db.execute("CREATE INDEX idx_calls_session_time ON calls (session, started_at)")
    db.execute(f"INSERT INTO call_totals (grp, {', '.join(NAMES)}) {_grouped('')}")


def add_call(db: Db, rowid: int | None) -> None:
    """Count the call just inserted at ``rowid`` into its group (one statement, the writer's
    transaction). A file migrated only part of the way (before m020) has no totals to keep."""
    try:
        db.conn.execute(_ADD, [rowid])
    except sqlite3.OperationalError as e:
        if "no such table: call_totals" not in str(e):
            raise


def refresh(db: Db, sessions: Iterable[str]) -> None:
    """Rebuild the groups of ``sessions`` from their calls (a session without calls has none):
    after calls were deleted or re-analysed, inside that transaction."""
    names = sorted(set(sessions))
    for start in range(0, len(names), 500):
        part = names[start : start + 500]
        marks = ", ".join("?" for _ in part)
        db.execute(f"DELETE FROM call_totals WHERE session IN ({marks})", part)
        db.execute(f"INSERT INTO call_totals (grp, {', '.join(NAMES)}) {_grouped(f'WHERE session IN ({marks})')}", part)


def kept(db: Db) -> bool:
    """Whether the file keeps the totals (a file opened without migrating may be older)."""
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'call_totals'").fetchone()
    return found is not None


def source(db: Db) -> str:
    """What to read the totals FROM: the table, else the same groups computed from ``calls``."""
    if kept(db):
        return "call_totals"
    cols = frozenset(r[1] for r in db.execute("PRAGMA table_info(calls)").fetchall())
    return f"({_grouped('', cols)})"


def recomputed(db: Db) -> list[tuple[Any, ...]]:
    """Every group computed afresh from ``calls``, as the table should hold it (for checks)."""
    return db.execute(f"SELECT grp, {', '.join(NAMES)} FROM ({_grouped('')}) ORDER BY grp").fetchall()


def stored(db: Db) -> list[tuple[Any, ...]]:
    """Every group as the table holds it (for checks)."""
    return db.execute(f"SELECT grp, {', '.join(NAMES)} FROM call_totals ORDER BY grp").fetchall()
