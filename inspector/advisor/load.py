"""Where the advisor meets the store: a session read through the store's functions, then built.

The one module of ``advisor/`` that touches a database (docs/architecture.md, "Findings"); the
others are pure, like ``analyses/``.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.advisor.model import Session, build_session
from ctxscope.inspector.analyses.prices import PriceTable
from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.store.analysis_queries import resolve_session
from ctxscope.inspector.store.session_calls import session_calls


def load_session(db: sqlite_utils.Database, session: str, prices: PriceTable | None = None) -> Session | None:
    """The session named by an id or a unique prefix (AmbiguousCallId if several), None if unknown."""
    full = resolve_session(db, session)
    if full is None:
        return None
    rows = session_calls(db, full)
    for row in rows:
        row["started_at"] = unix_time(row.get("started_at"))
    return build_session(full, rows, prices=prices)
