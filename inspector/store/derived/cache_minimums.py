"""Per-model cache minimums learned from what providers reported (docs/architecture.md, "Cache verdicts").

The analysis lowers a model's minimum when its provider caches a shorter prefix than the built-in
table allows; each lowering is kept here with the call that showed it, so ``reindex`` and a
restarted daemon start from them.
"""

from __future__ import annotations

import sqlite3

from ctxscope.inspector.store.db import Db


def load(db: Db) -> list[tuple[str, str, int, float]]:
    """Every learned minimum as (family, model, tokens, learned_at); none in a file older than the table."""
    try:
        rows = db.execute("SELECT family, model, tokens, learned_at FROM cache_minimums").fetchall()
    except sqlite3.OperationalError:
        return []
    return [(family, model, tokens, at) for family, model, tokens, at in rows]


def save(db: Db, family: str, model: str, tokens: int, learned_at: float, call_id: str) -> None:
    """Keep a minimum learned from ``call_id``'s usage (a reanalysis of that call replaces it)."""
    db.execute(
        """INSERT OR REPLACE INTO cache_minimums (family, model, learned_from, learned_at, tokens)
           VALUES (?, ?, ?, ?, ?)""",
        [family, model, call_id, learned_at, tokens],
    )
