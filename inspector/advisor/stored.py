"""A session's findings read from its calls' stored facts: no body is read (docs/architecture.md,
"Findings"). A session stored before the writer took facts, or whose facts no longer match its
threads (a ``reindex`` regrouped it), is taken again from its bodies once, and stored."""

from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from ctxscope.inspector.advisor.call_facts import CallFacts
from ctxscope.inspector.advisor.findings import Finding, assemble
from ctxscope.inspector.analyses.prices import PriceTable, load_prices
from ctxscope.inspector.pipeline.findings_record import backfill
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


def stored_findings(
    db: sqlite_utils.Database, session: str, prices: PriceTable | None = None, *, now: float | None = None
) -> SessionFindings | None:
    """The findings of the session named by an id or a unique prefix (AmbiguousCallId if several),
    None if unknown."""
    full = resolve_session(db, session)
    if full is None:
        return None
    prices = prices if prices is not None else load_prices()
    facts = valid_facts(findings_facts.session_rows(db, full), full)
    taken_again = facts is None
    if facts is None:
        facts = backfill(db, full, prices)
    read = [f for f in facts if not f.skip]
    return SessionFindings(full, len(read), len(facts) - len(read), assemble(facts, prices, now=now), taken_again)


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
