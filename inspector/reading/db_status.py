"""``ctxscope db status``: what the store holds, what running writers say, and what waits in spools."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.export_rows import export_lags
from ctxscope.inspector.store.queries import store_status
from ctxscope.inspector.writer.status import capture_state
from ctxscope.inspector.writer.wire.spool import spool_status


def db_status(db_path: str | Path) -> dict:
    """Size, counts, storage efficiency, schema and persisted writer failures of a capture DB, with
    the state running writers publish (true while the store fails), the spools beside it and how
    far each OTLP export endpoint is behind."""
    path = Path(db_path)
    status: dict[str, Any] = {"path": str(path), "exists": path.exists()}
    status["capture"] = capture_state(path)
    status["spool"] = spool_status(path)
    status = store_status(path, status)
    if path.exists() and "error" not in status:
        status["export"] = _export_lag(path)
    return status


def _export_lag(path: Path) -> list[dict[str, Any]]:
    try:
        db = store.connect(path, check_same_thread=False, migrate=False)
    except sqlite3.Error:
        return []
    try:
        return [asdict(lag) for lag in export_lags(db)]
    except sqlite3.Error:
        return []
    finally:
        db.close()
