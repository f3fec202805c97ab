"""The UI's findings panel and advisor page: a session read through the advisor, as JSON.

No SQL here: the advisor reads the session through the store's functions (``inspector/advisor/load.py``).
Prices are genai-prices' (docs/architecture.md, "The simulator is free"); losses are the stored ones.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.advisor.findings import by_call
from ctxscope.inspector.reading.stored_advice import stored_advice
from ctxscope.inspector.reading.stored_findings import stored_findings


def findings_view(db: sqlite_utils.Database, session: str, backfill_allowed: bool = True) -> dict | None:
    """A session's findings and the kinds per call (for badges), from its calls' stored facts (no body
    read); None for an unknown session. ``backfill_allowed=False``: FactsMissing for a session whose
    facts must first be taken from its bodies (the daemon does that in a child, web/compute.py)."""
    s = stored_findings(db, session, backfill_allowed=backfill_allowed)
    if s is None:
        return None
    found = s.findings
    return {"session": s.session, "calls": s.calls, "findings": [f.as_dict() for f in found], "by_call": by_call(found)}


def advice_view(db: sqlite_utils.Database, session: str, backfill_allowed: bool = True) -> dict | None:
    """The advisor's alternatives for a session (``advice`` None when no prompt can be replayed),
    from the calls' stored shapes and findings (``reading/stored_advice.py``); FactsMissing, with
    ``backfill_allowed=False``, for a session whose shapes must first be taken from its bodies."""
    found = stored_advice(db, session, backfill_allowed=backfill_allowed)
    if found is None:
        return None
    s, result = found
    return {"session": s.id, "advice": result.as_dict() if result is not None else None}
