"""The session page's data: one page of the call timeline plus a compact series of every call.

A 1,000-call session must open in well under a second, so the table gets one page of rows and the
chart gets column arrays (a few numbers per call) instead of 1,000 full rows; both come from the
call index alone, never from bodies.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime

import sqlite_utils

from ctxscope.inspector.base.usd import total_usd
from ctxscope.inspector.store.analysis_queries import provider_agreement_counts
from ctxscope.inspector.store.columns import call_columns
from ctxscope.inspector.store.derived import titles
from ctxscope.inspector.store.queries import list_calls
from ctxscope.inspector.store.sessions import HitRate, is_subagent_call, is_tool_round, thread_order
from ctxscope.inspector.store.views import call_values, session_columns
from ctxscope.vocab.kinds import CacheVerdict
from ctxscope.web.fields import ANALYSIS_COLUMNS, normalise_call, usage_cost

PAGE = 100
MAX_PAGE = 500
LIVE_SECONDS = 60  # a session with a call this recent is live: it opens on its latest page


def _with_extras(db: sqlite_utils.Database, session: str, rows: list[dict]) -> list[dict]:
    """Summary rows with whatever analysis columns the store has beside them, normalised."""
    if not rows:
        return rows
    cols = call_columns(db)
    wanted = [c for c in ANALYSIS_COLUMNS if c in cols and c not in rows[0]]
    wanted += [c for c in sorted(cols) if c.startswith("cache_") and c not in rows[0]]
    if "client" not in rows[0]:
        wanted.append("client")
    if wanted:  # columns list_calls does not return (yet): fetch them beside it
        extra = call_values(db, [r["id"] for r in rows], wanted)
        for row in rows:
            row.update(zip(wanted, extra.get(row["id"], (None,) * len(wanted)), strict=True))
    return [normalise_call(r) for r in rows]


_LIGHT = (
    "id",
    "provider",
    "seq",
    "started_at",
    "model",
    "outcome",
    "status",
    "duration_ms",
    "ttfb_ms",
    "usage_input",
    "usage_output",
    "usage_cache_read",
    "usage_cache_write",
    "path",
    "stop_reason",
    "error",
)
_LIGHT_OPTIONAL = (
    "thread",
    "relation",
    "pointer",
    "epoch_reason",
    "tokens_estimated",
    "has_compaction_before",
    "cache_lost_tokens",
    "cache_lost_usd",
    "markers",
    "grouped_by",
    "annotations",
)


def _light_rows(db: sqlite_utils.Database, session: str) -> list[dict]:
    """A few index columns of every call of the session (no JSON decoding): series, summary, filters."""
    return session_columns(db, session, [*_LIGHT, *_LIGHT_OPTIONAL])


def _markers(row: dict) -> list:
    value = row.get("markers")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


def _matches(row: dict, f: dict) -> bool:
    if f.get("relation") and row.get("relation") != f["relation"]:
        return False
    if f.get("verdict") and row.get("verdict") != f["verdict"]:
        return False
    if f.get("model") and row.get("model") != f["model"]:
        return False
    if f.get("thread") and row.get("thread") != f["thread"]:
        return False
    if f.get("marker") and not any(isinstance(m, dict) and m.get("kind") == f["marker"] for m in _markers(row)):
        return False
    q = (f.get("q") or "").strip().lower()
    if q:
        hay = " ".join(
            str(x)
            for x in (
                row.get("id"),
                row.get("model"),
                row.get("pointer"),
                row.get("relation"),
                row.get("epoch_reason"),
                row.get("outcome"),
                row.get("status"),
                row.get("stop_reason"),
                row.get("error"),
                row.get("path"),
                row.get("verdict"),
                " ".join(str(m.get("kind")) for m in _markers(row) if isinstance(m, dict)),
            )
            if x is not None
        ).lower()
        if q not in hay:
            return False
    return True


def _series(rows: list[dict], threads: dict[str, int]) -> dict:
    """Column arrays for the charts: context size and cache read / write / uncached per call."""
    ok = [r["outcome"] == "ok" and (r["status"] or 0) < 400 for r in rows]
    return {
        "start": _starts(rows),
        "id": [r["id"] for r in rows],
        "seq": [r["seq"] for r in rows],
        "thread": [threads.get(r["thread"]) if r.get("thread") else None for r in rows],
        "relation": [r.get("relation") for r in rows],
        "verdict": [r.get("verdict") for r in rows],
        "ctx": [r["usage_input"] if r.get("tokens_estimated") is None else r["tokens_estimated"] for r in rows],
        "input": [r["usage_input"] for r in rows],
        "read": [r["usage_cache_read"] for r in rows],
        "write": [r["usage_cache_write"] for r in rows],
        "ms": [r["duration_ms"] for r in rows],
        "compaction": [bool(r.get("has_compaction_before")) for r in rows],
        "ok": ok,
    }


def _starts(rows: list[dict]) -> list[int | None]:
    """Each call's start in milliseconds after the session's first call: the waterfall's x axis."""
    stamps: list[float | None] = []
    for r in rows:
        try:
            stamps.append(_unix(r["started_at"]) if r.get("started_at") else None)
        except (TypeError, ValueError):  # an imported capture's odd stamp: no bar, not an error
            stamps.append(None)
    first = min((t for t in stamps if t is not None), default=None)
    return [None if t is None or first is None else round((t - first) * 1000) for t in stamps]


def _summary(rows: list[dict]) -> dict:
    inp = sum(r["usage_input"] or 0 for r in rows)
    read = sum(r["usage_cache_read"] or 0 for r in rows)
    out = sum(r["usage_output"] or 0 for r in rows)
    cost, guessed, priced, unpriced = 0.0, False, False, None
    for r in rows:
        usd, g, why = usage_cost(
            r["model"],
            r["usage_input"],
            r["usage_output"],
            r["usage_cache_read"],
            r["usage_cache_write"],
            at=r.get("started_at"),
            provider=r.get("provider"),  # the simulator is free: prices.py says so, once
        )
        if usd is not None:
            cost, guessed, priced = cost + usd, guessed or g, True
        unpriced = unpriced or why
    verdicts = [r.get("verdict") for r in rows]
    lost = [r.get("cache_lost_tokens") for r in rows]
    lost_usd = [r.get("cache_lost_usd") for r in rows]
    return {
        "calls": len(rows),
        "models": sorted({r["model"] for r in rows if r.get("model")}),
        "first_started_at": rows[0]["started_at"] if rows else None,
        "last_started_at": rows[-1]["started_at"] if rows else None,
        "tokens": inp + out,
        "cached_share": {"read": read, "input": inp, "ratio": read / inp} if inp else None,
        "hit_rate": HitRate.of(verdicts).as_view(),
        "lost_tokens": sum(x or 0 for x in lost) if any(x is not None for x in lost) else None,
        "lost_usd": total_usd(lost_usd),  # the one loss figure (analyses/cache/loss.py)
        "breaks": sum(v == CacheVerdict.CLIENT_BREAK for v in verdicts) if any(verdicts) else None,
        "cost_usd": round(cost, 6) if priced else None,
        "cost_estimated": guessed,
        "cost_unpriced": None if priced else unpriced,
        "errors": sum(not (r["outcome"] == "ok" and (r["status"] or 0) < 400) for r in rows),
        "grouped_by": dict(Counter(r["grouped_by"] for r in rows if r.get("grouped_by"))),
    }


def _page_rows(
    db: sqlite_utils.Database, session: str, ids: list[str], offset: int, limit: int, filtered: bool
) -> list[dict]:
    """Full summary rows of one page; unfiltered pages are a plain LIMIT/OFFSET read."""
    if not filtered:
        return _with_extras(
            db, session, list_calls(db, session=session, limit=limit, offset=offset, newest_first=False)
        )
    wanted = set(ids)
    rows = [r for r in list_calls(db, session=session, limit=None, newest_first=False) if r["id"] in wanted]
    return _with_extras(db, session, rows)


def opening_offset(rows: list[dict], limit: int, now: float) -> tuple[int | None, str]:
    """The page a session opens on: while it is live (a call in the last ``LIVE_SECONDS``), the latest
    (None); once it is quiet, the page holding its last break, where its story is; ``"latest"`` or
    ``"last_break"`` says which (docs/architecture.md, "A session opens where its story is")."""
    last = rows[-1].get("started_at")
    live = last is None or now - _unix(last) < LIVE_SECONDS
    breaks = [i for i, r in enumerate(rows) if r.get("verdict") == CacheVerdict.CLIENT_BREAK]
    if live or not breaks:
        return None, "latest"
    return breaks[-1] // limit * limit, "last_break"


def _unix(stamp: str) -> float:
    """The store's ISO 8601 UTC text (``inspector/base/clock.py``: ``iso``) as Unix seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def session_view(
    db: sqlite_utils.Database,
    session: str,
    *,
    offset: int | None = None,
    limit: int = PAGE,
    filters: dict | None = None,
    now: float | None = None,
) -> dict | None:
    """A page of the timeline, the series and a summary. ``offset`` None opens where the story is
    (``opening_offset``); a negative ``offset`` is the latest page; ``now`` is the clock (Unix s)."""
    rows = _light_rows(db, session)
    if not rows:
        return None
    stats: dict[str, dict] = {}
    for r in rows:
        t = r.get("thread")
        if t:
            s = stats.setdefault(t, {"thread": t, "calls": 0, "tool_rounds": 0, "first_seq": r["seq"]})
            s["calls"] += 1
            s["tool_rounds"] += is_tool_round(r.get("markers"))
            s["subagent"] = s.get("subagent") or is_subagent_call(r.pop("annotations", None))
    order = thread_order(stats.values())  # the main thread first: index 0, as on every page and in the CLI
    threads = {t: i for i, t in enumerate(order)}
    counts = {t: s["calls"] for t, s in stats.items()}
    main = order[0] if order else None
    filters = {k: v for k, v in (filters or {}).items() if v}
    picked = [r for r in rows if _matches(r, filters)] if filters else rows
    limit = max(1, min(limit, MAX_PAGE))
    total = len(picked)
    latest = max(0, (total - 1) // limit * limit) if total else 0
    opened = "latest"
    if offset is None and not filters:
        offset, opened = opening_offset(rows, limit, time.time() if now is None else now)
    if offset is None or offset < 0:
        offset = latest
    ids = [r["id"] for r in picked[offset : offset + limit]]
    page = _page_rows(db, session, ids, offset, limit, bool(filters)) if ids else []
    for r in page:
        r["thread_index"] = threads.get(r["thread"]) if r.get("thread") else None
    return {
        "session": session,
        "title": titles.title(db, session),
        "total": total,
        "all": len(rows),
        "offset": offset,
        "limit": limit,
        "opened": opened,
        "calls": page,
        "series": _series(rows, threads),
        "summary": {
            **_summary(rows),
            "provider_agreement": provider_agreement_counts(db, "WHERE session = ?", [session], per_session=False)
            if "cache" in call_columns(db)
            else None,
        },
        "threads": [{"thread": t, "index": i, "calls": counts[t], "main": t == main} for t, i in threads.items()],
        "analysis": any(r.get("relation") is not None for r in rows),
    }
