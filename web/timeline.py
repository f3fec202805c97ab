"""The session page's data: one page of the call timeline plus a compact series of every call.

A 1,000-call session must open in well under a second, so the table gets one page of rows and the
chart gets column arrays (a few numbers per call) instead of 1,000 full rows; both come from the
call index alone, never from bodies.
"""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.queries import list_calls
from ctxscope.web.fields import ANALYSIS_COLUMNS, HIT_ELIGIBLE, call_columns, normalise_call, usage_cost

PAGE = 100
MAX_PAGE = 500


def session_rows(db: sqlite_utils.Database, session: str) -> list[dict]:
    """Every call summary of a session in timeline order, with whatever analysis the store has."""
    rows = list_calls(db, session=session, limit=None, newest_first=False)
    if not rows:
        return rows
    cols = call_columns(db)
    wanted = [c for c in ANALYSIS_COLUMNS if c in cols and c not in rows[0]]
    wanted += [c for c in sorted(cols) if c.startswith("cache_") and c not in rows[0]]
    if "client" not in rows[0]:
        wanted.append("client")
    if wanted:  # columns list_calls does not return (yet): fetch them beside it
        extra = {
            r[0]: r[1:]
            for r in db.execute(f"SELECT id, {', '.join(wanted)} FROM calls WHERE session = ?", [session]).fetchall()
        }
        for row in rows:
            row.update(zip(wanted, extra.get(row["id"], (None,) * len(wanted))))
    return [normalise_call(r) for r in rows]


def _matches(row: dict, f: dict) -> bool:
    if f.get("relation") and row.get("relation") != f["relation"]:
        return False
    if f.get("verdict") and (row.get("cache") or {}).get("verdict") != f["verdict"]:
        return False
    if f.get("model") and row.get("model") != f["model"]:
        return False
    if f.get("thread") and row.get("thread") != f["thread"]:
        return False
    if f.get("marker") and not any(isinstance(m, dict) and m.get("kind") == f["marker"] for m in row["markers"]):
        return False
    q = (f.get("q") or "").strip().lower()
    if q:
        hay = " ".join(
            str(x)
            for x in (
                row.get("id"), row.get("model"), row.get("pointer"), row.get("relation"), row.get("epoch_reason"),
                row.get("outcome"), row.get("status"), row.get("stop_reason"), row.get("error"), row.get("path"),
                (row.get("cache") or {}).get("verdict"),
                " ".join(str(m.get("kind")) for m in row["markers"] if isinstance(m, dict)),
            )
            if x is not None
        ).lower()  # fmt: skip
        if q not in hay:
            return False
    return True


def _series(rows: list[dict], threads: dict[str, int]) -> dict:
    """Column arrays for the charts: context size and cache read / write / uncached per call."""
    keys = ("id", "seq", "t", "thread", "relation", "verdict", "ctx", "input", "read", "write", "output",
            "ms", "ttfb", "compaction", "ok")  # fmt: skip
    s: dict[str, list] = {k: [] for k in keys}
    for r in rows:
        u = r.get("usage") or {}
        s["id"].append(r["id"])
        s["seq"].append(r["seq"])
        s["t"].append(r["started_at"])
        s["thread"].append(threads.get(r.get("thread")) if r.get("thread") else None)
        s["relation"].append(r.get("relation"))
        s["verdict"].append((r.get("cache") or {}).get("verdict"))
        s["ctx"].append(r.get("tokens_estimated") if r.get("tokens_estimated") is not None else u.get("input"))
        s["input"].append(u.get("input"))
        s["read"].append(u.get("cache_read"))
        s["write"].append(u.get("cache_write"))
        s["output"].append(u.get("output"))
        s["ms"].append(r.get("duration_ms"))
        s["ttfb"].append(r.get("ttfb_ms"))
        s["compaction"].append(bool(r.get("has_compaction_before")))
        s["ok"].append(r.get("outcome") == "ok" and (r.get("status") or 0) < 400)
    return s


def _summary(rows: list[dict]) -> dict:
    inp = sum((r.get("usage") or {}).get("input") or 0 for r in rows)
    read = sum((r.get("usage") or {}).get("cache_read") or 0 for r in rows)
    out = sum((r.get("usage") or {}).get("output") or 0 for r in rows)
    cost, guessed, priced = 0.0, False, False
    for r in rows:
        u = r.get("usage") or {}
        usd, g = usage_cost(r.get("model"), u.get("input"), u.get("output"), u.get("cache_read"), u.get("cache_write"))
        if usd is not None:
            cost, guessed, priced = cost + usd, guessed or g, True
    verdicts = [(r.get("cache") or {}).get("verdict") for r in rows]
    eligible = sum(v in HIT_ELIGIBLE for v in verdicts)
    hits = sum(v == "hit" for v in verdicts)
    lost = [(r.get("cache") or {}).get("lost_tokens") for r in rows]
    lost_usd = [(r.get("cache") or {}).get("lost_cost_usd") for r in rows]
    return {
        "calls": len(rows),
        "models": sorted({r["model"] for r in rows if r.get("model")}),
        "first_started_at": rows[0]["started_at"] if rows else None,
        "last_started_at": rows[-1]["started_at"] if rows else None,
        "tokens": inp + out,
        "cached_share": {"read": read, "input": inp, "ratio": read / inp} if inp else None,
        "hit_rate": {"hits": hits, "eligible": eligible, "ratio": hits / eligible} if eligible else None,
        "lost_tokens": sum(x or 0 for x in lost) if any(x is not None for x in lost) else None,
        "lost_usd": round(sum(x or 0 for x in lost_usd), 6) if any(x is not None for x in lost_usd) else None,
        "breaks": sum(v == "client_break" for v in verdicts) if any(verdicts) else None,
        "cost_usd": round(cost, 6) if priced else None,
        "cost_estimated": guessed,
        "errors": sum(not (r.get("outcome") == "ok" and (r.get("status") or 0) < 400) for r in rows),
    }


def session_view(
    db: sqlite_utils.Database, session: str, *, offset: int | None = None, limit: int = PAGE, filters: dict | None = None
) -> dict | None:
    """A page of the timeline (the last page when ``offset`` is None), the series and a summary."""
    rows = session_rows(db, session)
    if not rows:
        return None
    threads: dict[str, int] = {}
    for r in rows:
        if r.get("thread") and r["thread"] not in threads:
            threads[r["thread"]] = len(threads)
    counts = {t: 0 for t in threads}
    for r in rows:
        if r.get("thread"):
            counts[r["thread"]] += 1
    main = max(counts, key=lambda t: counts[t]) if counts else None
    picked = [r for r in rows if _matches(r, filters or {})]
    limit = max(1, min(limit, MAX_PAGE))
    total = len(picked)
    if offset is None or offset < 0:
        offset = max(0, (total - 1) // limit * limit) if total else 0
    page = picked[offset : offset + limit]
    for r in page:
        r["thread_index"] = threads.get(r.get("thread")) if r.get("thread") else None
    return {
        "session": session,
        "total": total,
        "all": len(rows),
        "offset": offset,
        "limit": limit,
        "calls": page,
        "series": _series(rows, threads),
        "summary": _summary(rows),
        "threads": [{"thread": t, "index": i, "calls": counts[t], "main": t == main} for t, i in threads.items()],
        "analysis": any(r.get("relation") is not None for r in rows),
    }
