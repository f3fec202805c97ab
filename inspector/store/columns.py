"""Which optional analysis columns a capture file has, and SQL that reads them when it does.

The analysis columns come with later migrations; a file written before them (or by an older
version) lacks them until it is opened for writing. Readers ask ``call_columns`` first instead of
assuming a schema and show a dash for what is missing.
"""

from __future__ import annotations

import sqlite_utils


def call_columns(db: sqlite_utils.Database) -> frozenset[str]:
    return frozenset(r[1] for r in db.execute("PRAGMA table_info(calls)").fetchall())


def verdict_sql(cols: frozenset[str]) -> str | None:
    """SQL for the verdict name, whether the column holds a bare name or a JSON object."""
    if "cache_verdict" not in cols:
        return None
    return (
        "(CASE WHEN json_valid(cache_verdict) AND json_type(cache_verdict) = 'object' "
        "THEN json_extract(cache_verdict, '$.verdict') ELSE cache_verdict END)"
    )
