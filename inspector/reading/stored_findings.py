"""A session's findings read from its calls' stored facts: no body is read (docs/architecture.md,
"Findings"). A session stored before the writer took facts, or whose facts no longer match its
threads (a ``reindex`` regrouped it), is taken again from its bodies once, and stored."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import sqlite_utils

from ctxscope.inspector.advisor.call_facts import CallFacts, break_loss
from ctxscope.inspector.advisor.findings import Finding, assemble
from ctxscope.inspector.analyses.prices import PriceTable, load_prices
from ctxscope.inspector.store.analysis_queries import resolve_session
from ctxscope.inspector.store.derived import findings_facts
from ctxscope.inspector.store.derived.findings_facts import FactsRow


@dataclass(frozen=True)
class SessionFindings:
    session: str
    calls: int  # calls whose prompt was read
    skipped: int  # calls without a prompt we could read
    findings: list[Finding]
    taken_again: bool  # the facts were taken from the bodies this time (then stored)


class FactsMissing(LookupError):
    """The session's facts must be taken from its bodies first (asked not to, ``backfill=False``)."""


def stored_findings(
    db: sqlite_utils.Database,
    session: str,
    prices: PriceTable | None = None,
    *,
    now: float | None = None,
    backfill_allowed: bool = True,
) -> SessionFindings | None:
    """The findings of the session named by an id or a unique prefix (AmbiguousCallId if several),
    None if unknown. ``backfill_allowed=False``: FactsMissing rather than reading bodies."""
    full = resolve_session(db, session)
    if full is None:
        return None
    prices = prices if prices is not None else load_prices()
    rows = findings_facts.session_rows(db, full)
    facts = valid_facts(rows, full)
    taken_again = facts is None
    if facts is None:
        if not backfill_allowed:
            raise FactsMissing(full)
        from ctxscope.inspector.pipeline.findings_record import backfill  # the pipeline's imports: only to take them

        facts = backfill(db, full, prices)
    facts = with_row_figures(facts, rows)
    read = [f for f in facts if not f.skip]
    return SessionFindings(full, len(read), len(facts) - len(read), assemble(facts, prices, now=now), taken_again)


def with_row_figures(facts: list[CallFacts], rows: list[FactsRow]) -> list[CallFacts]:
    """Each call's facts with its upstream and the loss the analysis stored, from its row."""
    by_id = {row.call_id: row for row in rows}
    out = []
    for f in facts:
        row = by_id.get(f.id)
        cache = _json(row.cache) if row is not None else {}
        out.append(
            replace(
                f,
                provider=row.provider if row is not None else f.provider,
                **break_loss(cache.get("verdict"), cache.get("lost_tokens"), cache.get("lost_cost_usd")),
            )
        )
    return out


def _json(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def valid_facts(rows: list[FactsRow], session: str) -> list[CallFacts] | None:
    """The stored facts of every call, if each call has them and each compares with the call before
    it in its thread; None otherwise (the session is then taken again)."""
    out: list[CallFacts] = []
    last: dict[str, str] = {}
    for row in rows:
        facts = CallFacts.from_json(row.facts) if row.facts is not None else None
        thread = row.thread or row.call_id
        if facts is None or facts.id != row.call_id or facts.session != session or facts.thread != thread:
            return None
        if not facts.skip:
            if facts.prev != last.get(thread):
                return None
            last[thread] = facts.id
        out.append(facts)
    return out
