"""The sessions page's data: one row per session with its clients, cost and thread tree.

The aggregates (and the hit-rate rule) are the store's, shared with the CLI
(``store.sessions``); cost needs each model's price, so the store hands the usage per model and
it is priced and summed here.
"""

from __future__ import annotations

from collections import Counter

import sqlite_utils

from ctxscope.inspector.analyses.prices import SIMULATOR_FREE
from ctxscope.inspector.store.derived import titles
from ctxscope.inspector.store.sessions import SessionAggregate, session_aggregates, thread_order
from ctxscope.inspector.store.views import client_counts, thread_groups
from ctxscope.web.fields import client_name, usage_cost


def list_session_overviews(db: sqlite_utils.Database, *, limit: int = 500, purposes: bool = False) -> list[dict]:
    """Sessions, most recently active first, with client, models, tokens, hit rate, breaks, cost, threads;
    ``purposes``: with the sessions the project made itself (each row says its ``purpose``)."""
    aggregates = session_aggregates(db, limit=limit, purposes=purposes)
    if not aggregates:
        return []
    sessions = {a.session: _row(a) for a in aggregates}
    _add_clients(db, sessions)
    _add_threads(db, sessions)
    named = titles.of(db, list(sessions))  # stored as the sessions' first calls were (pipeline/session_titles.py)
    for row in sessions.values():  # the list's and the tab's name for it (docs/architecture.md, "The command line")
        row["title"] = named[row["session"]]
    return list(sessions.values())


def session_cost(a: SessionAggregate) -> tuple[float | None, bool, str | None]:
    """The session's cost in USD (None when nothing could be priced), whether a price was guessed, and
    why a model had no price (the first reason). Each model's usage is priced at the rates of the
    session's last call, base tier: the store sums usage per model, not per call.

    Only its non-simulator calls are priced (``by_model`` holds no simulator call): the simulator is
    free, also in a session that mixes it with a real provider (docs/architecture.md, "The simulator is
    free"). The CLI's ``sessions`` uses it too."""
    cost, guessed, unpriced = None, False, None
    for m in a.by_model:
        usd, g, why = usage_cost(m.model, m.input, m.output, m.cache_read, m.cache_write, at=a.last_started_at)
        if usd is not None:
            cost, guessed = (cost or 0.0) + usd, guessed or g
        unpriced = unpriced or why
    if not a.by_model and a.calls:
        unpriced = SIMULATOR_FREE  # by_model holds every call but the simulator's
    return (round(cost, 6) if cost is not None else None), guessed, unpriced


def _row(a: SessionAggregate) -> dict:
    cost, guessed, unpriced = session_cost(a)
    u = a.usage
    return {
        "session": a.session,
        "purpose": a.purpose,
        "calls": a.calls,
        "first_started_at": a.first_started_at,
        "last_started_at": a.last_started_at,
        "models": a.models,
        "clients": [],
        "usage": dict(u),
        "reported_calls": a.reported_calls,
        "errors": a.errors,
        "breaks": a.breaks,
        "diverged": a.diverged,
        "compactions": a.compactions,
        "tokens_estimated": a.tokens_estimated,
        "cost_usd": cost,
        "cost_estimated": guessed,
        "cost_unpriced": unpriced,
        "threads": [],
        "lost_tokens": a.lost_tokens,
        "lost_usd": a.lost_usd,
        "tokens": (u["input"] or 0) + (u["output"] or 0)
        if (u["input"] is not None or u["output"] is not None)
        else None,
        "cached_share": (
            {"read": u["cache_read"] or 0, "input": u["input"], "ratio": (u["cache_read"] or 0) / u["input"]}
            if u["input"]
            else None
        ),
        "hit_rate": a.hit_rate.as_view(),
    }


def _add_clients(db: sqlite_utils.Database, sessions: dict[str, dict]) -> None:
    counts: dict[str, Counter] = {}
    for session, ua, n in client_counts(db, sessions):
        name = client_name(ua)
        if name:
            counts.setdefault(session, Counter())[name] += n
    for session, c in counts.items():
        sessions[session]["clients"] = [name for name, _ in c.most_common()]


def _add_threads(db: sqlite_utils.Database, sessions: dict[str, dict]) -> None:
    """Threads per session: the main thread (the store's ``thread_order``: the agent loop), then
    its side threads (``depth`` 1), numbered as the session page and the CLI number them."""
    by_session: dict[str, list[dict]] = {}
    for session, group in thread_groups(db, sessions):
        by_session.setdefault(session, []).append(group)
    for session, threads in by_session.items():
        by_id = {t["thread"]: t for t in threads}
        flat: list[dict] = []
        for index, thread_id in enumerate(thread_order(threads)):
            t = by_id[thread_id]
            t.update(
                index=index,
                main=index == 0,
                depth=0 if index == 0 else 1,
                parent_thread=None if index == 0 else flat[0]["thread"],
            )
            flat.append(t)
        sessions[session]["threads"] = flat
