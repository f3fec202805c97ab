"""A session's calls with their bodies, in order: what the findings and the cache advisor read.

Only reads. The bodies come back parsed (the request JSON, the final response); a body that does
not parse comes back as None, so one bad call costs its own analysis and nothing else.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ctxscope.inspector.store import queries
from ctxscope.inspector.store.columns import with_defaults
from ctxscope.inspector.store.db import Db

if TYPE_CHECKING:  # the writer child, which reads the rows below, never loads sqlite-utils
    import sqlite_utils

_COLUMNS = (
    "id, seq, started_at, api, model, provider, thread, key_fingerprint, usage_input, usage_output, usage_cache_read, "
    "usage_cache_write, cache_verdict, cache, outcome, status, has_compaction_before"
)


def session_call_rows(db: Db, session: str) -> Iterator[dict[str, Any]]:
    """The columns the findings read of each call of ``session`` by seq, without bodies: the caller
    reads each call's body in turn."""
    cols = (
        "id, seq, started_at, api, model, thread, key_fingerprint, usage_input, usage_output, "
        "usage_cache_read, usage_cache_write, has_compaction_before"
    )
    ids = [r[0] for r in db.execute("SELECT id FROM calls WHERE session = ? ORDER BY seq", [session])]
    for call_id in ids:  # one row at a time: a long session's rows are not all held
        found = db.execute(f"SELECT {cols} FROM calls WHERE id = ?", [call_id])
        values = found.fetchone()
        if values is not None:  # None: deleted meanwhile
            yield dict(zip([d[0] for d in found.description], values, strict=True))


def session_calls(db: sqlite_utils.Database, session: str) -> list[dict[str, Any]]:
    """Every call of ``session`` (an exact id) by seq: its columns, ``usage``, ``cache`` decoded,
    ``body`` (the parsed request) and ``response`` (the final response object)."""
    rows = list(db.query(f"SELECT {_COLUMNS} FROM calls WHERE session = ? ORDER BY seq", [session]))
    out = []
    for row in rows:
        usage = {k: row.pop("usage_" + k) for k in ("input", "output", "cache_read", "cache_write")}
        row["usage"] = usage if any(v is not None for v in usage.values()) else None
        if isinstance(row.get("cache"), str):
            with contextlib.suppress(ValueError):
                row["cache"] = with_defaults("cache", json.loads(row["cache"]))
        row["body"] = None
        with contextlib.suppress(Exception):  # an undecodable body is analysed no further
            row["body"] = queries.get_request_json(db, row["id"])
        row["response"] = None
        with contextlib.suppress(Exception):
            row["response"] = queries.get_final_response(db, row["id"])
        out.append(row)
    return out


def session_call_columns(db: sqlite_utils.Database, session: str) -> list[dict[str, Any]]:
    """Every call of ``session`` by seq as ``session_calls`` gives it, without reading a body:
    ``usage`` and ``cache`` decoded, no ``body`` nor ``response``."""
    out = []
    for row in db.query(f"SELECT {_COLUMNS} FROM calls WHERE session = ? ORDER BY seq", [session]):
        usage = {k: row.pop("usage_" + k) for k in ("input", "output", "cache_read", "cache_write")}
        row["usage"] = usage if any(v is not None for v in usage.values()) else None
        if isinstance(row.get("cache"), str):
            with contextlib.suppress(ValueError):
                row["cache"] = with_defaults("cache", json.loads(row["cache"]))
        out.append(row)
    return out
