"""``ctxscope db status``: what the store holds, what running writers say, and what waits in spools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxscope.inspector.store.queries import store_status
from ctxscope.inspector.writer.spool import spool_status
from ctxscope.inspector.writer.status import capture_state


def db_status(db_path: str | Path) -> dict:
    """Size, counts, storage efficiency, schema and persisted writer failures of a capture DB, with
    the state running writers publish (true while the store fails) and the spools beside it."""
    path = Path(db_path)
    status: dict[str, Any] = {"path": str(path), "exists": path.exists()}
    status["capture"] = capture_state(path)
    status["spool"] = spool_status(path)
    return store_status(path, status)
