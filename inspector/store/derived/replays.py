"""Replays in the store: the link from a replay to the call it re-sent, and an original's replays."""

from __future__ import annotations

import json
from typing import Any

from ctxscope.inspector.store.db import Db


def set_replay_of(db: Db, call_id: str, original: str) -> None:
    db.execute("UPDATE calls SET replay_of = ? WHERE id = ?", [original, call_id])


def replays_of(db: Db, original: str) -> list[dict[str, Any]]:
    """The replays of ``original``, oldest first: id, session, started_at and annotations (decoded)."""
    rows = db.query(
        "SELECT id, session, started_at, annotations FROM calls WHERE replay_of = ? ORDER BY started_at, id",
        [original],
    )
    out = []
    for row in rows:
        try:
            row["annotations"] = json.loads(row["annotations"] or "[]")
        except ValueError:
            row["annotations"] = []
        out.append(row)
    return out
