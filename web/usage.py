"""The usage page's data: tokens, cache reads and dollars per UTC day and per model, each bar with
the sessions behind it (as Helicone and Langfuse show cost over time).

The store groups the calls by (day, model, session) (``store.views.usage_groups``); here each group
is priced once and summed into days and models. The simulator's calls count their tokens but cost
nothing (docs/architecture.md, "The simulator is free"); a model without a price gives no dollars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlite_utils

from ctxscope.inspector.store.views import usage_groups
from ctxscope.web.fields import usage_cost

MAX_DAYS = 3660
SESSIONS_PER_BAR = 50  # the biggest sessions behind a bar; the rest are counted


@dataclass
class Bar:
    """One bar: a day or a model, with its sums and the sessions behind it."""

    key: str
    calls: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    cost_estimated: bool = False
    sessions: dict[str, dict] = field(default_factory=dict)

    def add(self, session: str, calls: int, inp: int, out: int, read: int, write: int, usd: float | None) -> None:
        self.calls += calls
        self.input += inp
        self.output += out
        self.cache_read += read
        self.cache_write += write
        if usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usd
        s = self.sessions.setdefault(session, {"session": session, "calls": 0, "tokens": 0, "cost_usd": None})
        s["calls"] += calls
        s["tokens"] += inp + out
        if usd is not None:
            s["cost_usd"] = (s["cost_usd"] or 0.0) + usd

    def view(self) -> dict:
        ranked = sorted(self.sessions.values(), key=lambda s: (-(s["cost_usd"] or 0), -s["tokens"], s["session"]))
        for s in ranked:
            s["cost_usd"] = None if s["cost_usd"] is None else round(s["cost_usd"], 6)
        return {
            "key": self.key,
            "calls": self.calls,
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "cost_estimated": self.cost_estimated,
            "session_count": len(ranked),
            "sessions": ranked[:SESSIONS_PER_BAR],
        }


def usage_view(db: sqlite_utils.Database, days: int | None = None, now: datetime | None = None) -> dict:
    """Per day (oldest first) and per model (dearest first) over the last ``days`` UTC days (None: all)."""
    since = None
    if days is not None:
        days = max(1, min(days, MAX_DAYS))
        start = (now or datetime.now(UTC)).date() - timedelta(days=days - 1)
        since = start.isoformat()
    by_day: dict[str, Bar] = {}
    by_model: dict[str, Bar] = {}
    for day, model, session, simulated, calls, inp, out, read, write in usage_groups(db, since=since):
        inp, out, read, write = inp or 0, out or 0, read or 0, write or 0
        usd, guessed, _why = (None, False, None) if simulated else usage_cost(model, inp, out, read, write, at=day)
        day_bar = by_day.setdefault(day or "unknown", Bar(day or "unknown"))
        model_bar = by_model.setdefault(model or "–", Bar(model or "–"))
        for bar in (day_bar, model_bar):
            bar.add(session, calls, inp, out, read, write, usd)
            bar.cost_estimated = bar.cost_estimated or (usd is not None and guessed)
    models = sorted(by_model.values(), key=lambda b: (-(b.cost_usd or 0), -(b.input + b.output), b.key))
    total = Bar("total")
    for b in by_day.values():
        total.calls += b.calls
        total.input += b.input
        total.output += b.output
        total.cache_read += b.cache_read
        total.cache_write += b.cache_write
        if b.cost_usd is not None:
            total.cost_usd = (total.cost_usd or 0.0) + b.cost_usd
        total.cost_estimated = total.cost_estimated or b.cost_estimated
    totals = total.view()
    totals["session_count"] = len({s for b in by_day.values() for s in b.sessions})
    del totals["sessions"]
    return {
        "since": since,
        "days": [by_day[d].view() for d in sorted(by_day)],
        "models": [b.view() for b in models],
        "total": totals,
    }
