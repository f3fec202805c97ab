"""A session's advice from its calls' stored prompt shapes and findings facts: no body is read
(docs/architecture.md, "The cache advisor"). A session stored before the writer took shapes gets
them from its bodies once (with its findings facts, ``findings_record.backfill``); a what-if a
shape cannot express (a billing header cut out of a text) reads the bodies it rewrites one at a
time (``body_whatif.streamed``), so memory holds one body beside the shapes at any session size."""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.advisor.alternatives import Advice, advise
from ctxscope.inspector.advisor.model import Session
from ctxscope.inspector.advisor.shape import ShapeMissing, rebuild
from ctxscope.inspector.advisor.shape_whatif import NeedsBodies
from ctxscope.inspector.analyses.prices import PriceTable, load_prices
from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.reading.stored_findings import FactsMissing, stored_findings
from ctxscope.inspector.store.analysis_queries import resolve_session
from ctxscope.inspector.store.derived import call_shapes
from ctxscope.inspector.store.queries import get_request_json
from ctxscope.inspector.store.session_calls import session_call_columns


def shaped_session(
    db: sqlite_utils.Database, session: str, prices: PriceTable | None = None, *, backfill_allowed: bool = True
) -> Session | None:
    """The session (an id or unique prefix) rebuilt from its stored shapes; None if unknown,
    FactsMissing when its shapes must first be taken from its bodies and ``backfill_allowed`` is False."""
    full = resolve_session(db, session)
    if full is None:
        return None
    prices = prices if prices is not None else load_prices()
    rows = session_call_columns(db, full)
    for row in rows:
        row["started_at"] = unix_time(row.get("started_at"))
    try:
        calls = rebuild(rows, call_shapes.session_shapes(db, full) or {})
    except ShapeMissing:
        if not backfill_allowed:
            raise FactsMissing(full) from None
        from ctxscope.inspector.pipeline.findings_record import backfill  # the pipeline's imports: only to take them

        taken: dict[str, str] = {}
        backfill(db, full, prices, taken)
        calls = rebuild(rows, taken)  # stored, or not (a read-only store): read from what was taken
    return Session(full, tuple(calls), len(rows) - len(calls), prices, bodies=lambda call: get_request_json(db, call))


def stored_advice(
    db: sqlite_utils.Database, session: str, prices: PriceTable | None = None, *, backfill_allowed: bool = True
) -> tuple[Session, Advice | None] | None:
    """The session and its advice, from the stored shapes and findings; from the bodies when the
    shapes cannot be stored (a read-only store) or a what-if needs them. None for an unknown session."""
    prices = prices if prices is not None else load_prices()
    try:
        s = shaped_session(db, session, prices, backfill_allowed=backfill_allowed)
    except ShapeMissing:
        s = None
        shaped = False
    else:
        shaped = True
        if s is None:
            return None
    if shaped and s is not None:
        found = stored_findings(db, s.id, prices, backfill_allowed=backfill_allowed)
        try:
            return s, advise(s, found.findings if found is not None else None)
        except NeedsBodies:
            pass
    from ctxscope.inspector.advisor.load import load_session

    body = load_session(db, session, prices=prices)
    if body is None:
        return None
    return body, advise(body)
