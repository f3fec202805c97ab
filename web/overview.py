"""The sessions page's data: one row per session with its threads, in two grouped queries.

Aggregates come straight from SQL (GROUP BY session, model) so the page costs one pass over the
index, not over bodies; cost needs each model's price, so rows are grouped by model too and
summed here.
"""

from __future__ import annotations

import json
from collections import Counter

import sqlite_utils

from ctxscope.web.fields import HIT_ELIGIBLE, call_columns, client_name, usage_cost, verdict_sql


def list_session_overviews(db: sqlite_utils.Database, *, limit: int = 500) -> list[dict]:
    """Sessions, most recently active first, with client, models, tokens, hit rate, breaks, cost, threads."""
    cols = call_columns(db)
    verdict = verdict_sql(cols)
    extra = []
    extra.append(f"SUM({verdict} = 'client_break')" if verdict else "NULL")
    extra.append("SUM(relation = 'DIVERGED')" if "relation" in cols else "NULL")
    extra.append("SUM(has_compaction_before)" if "has_compaction_before" in cols else "NULL")
    extra.append("SUM(tokens_estimated)" if "tokens_estimated" in cols else "NULL")
    extra.append(f"SUM({verdict} = 'hit')" if verdict else "NULL")
    extra.append(f"SUM({verdict} IN ({', '.join(repr(v) for v in HIT_ELIGIBLE)}))" if verdict else "NULL")
    extra.append("SUM(cache_lost_tokens)" if "cache_lost_tokens" in cols else "NULL")
    extra.append("SUM(cache_lost_usd)" if "cache_lost_usd" in cols else "NULL")
    sql = f"""
      WITH recent AS (SELECT session, MAX(started_at) AS last FROM calls GROUP BY session ORDER BY last DESC LIMIT ?)
      SELECT c.session, c.model, COUNT(*), MIN(c.started_at), MAX(c.started_at),
             SUM(c.usage_input), SUM(c.usage_output), SUM(c.usage_cache_read), SUM(c.usage_cache_write),
             SUM(c.usage_input IS NOT NULL), SUM(c.outcome != 'ok' OR c.status >= 400), {", ".join(extra)}
      FROM calls c JOIN recent r ON r.session = c.session
      GROUP BY c.session, c.model"""
    sessions: dict[str, dict] = {}
    for row in db.execute(sql, [limit]).fetchall():
        (session, model, n, first, last, inp, out, read, write, reported, errors,
         breaks, diverged, compactions, estimated, hits, eligible, lost, lost_usd) = row  # fmt: skip
        s = sessions.setdefault(session, _blank(session))
        s["calls"] += n
        s["first_started_at"] = min(filter(None, [s["first_started_at"], first]), default=None)
        s["last_started_at"] = max(filter(None, [s["last_started_at"], last]), default=None)
        if model:
            s["models"].append(model)
        for key, value in (("input", inp), ("output", out), ("cache_read", read), ("cache_write", write)):
            if value is not None:
                s["usage"][key] = (s["usage"][key] or 0) + value
        s["reported_calls"] += reported or 0
        s["errors"] += errors or 0
        pairs = (("breaks", breaks), ("diverged", diverged), ("compactions", compactions), ("tokens_estimated", estimated),
                 ("cache_hits", hits), ("cache_eligible", eligible), ("lost_tokens", lost), ("lost_usd", lost_usd))
        for key, value in pairs:
            if value is not None:
                s[key] = (s[key] or 0) + value
        usd, guessed = usage_cost(model, inp, out, read, write)
        if usd is not None:
            s["cost_usd"] = (s["cost_usd"] or 0.0) + usd
            s["cost_estimated"] = s["cost_estimated"] or guessed
    if not sessions:
        return []
    _add_clients(db, sessions)
    if "thread" in cols:
        _add_threads(db, sessions, cols)
    out_rows = sorted(sessions.values(), key=lambda s: s["last_started_at"] or "", reverse=True)
    for s in out_rows:
        u = s["usage"]
        s["models"].sort()
        s["tokens"] = (u["input"] or 0) + (u["output"] or 0) if (u["input"] is not None or u["output"] is not None) else None
        s["cached_share"] = (
            {"read": u["cache_read"] or 0, "input": u["input"], "ratio": (u["cache_read"] or 0) / u["input"]}
            if u["input"]
            else None
        )
        hits, eligible = s.pop("cache_hits"), s.pop("cache_eligible")
        s["hit_rate"] = {"hits": hits or 0, "eligible": eligible, "ratio": (hits or 0) / eligible} if eligible else None
        if s["cost_usd"] is not None:
            s["cost_usd"] = round(s["cost_usd"], 6)
    return out_rows


def _blank(session: str) -> dict:
    return {
        "session": session, "calls": 0, "first_started_at": None, "last_started_at": None, "models": [],
        "clients": [], "usage": {"input": None, "output": None, "cache_read": None, "cache_write": None},
        "reported_calls": 0, "errors": 0, "breaks": None, "diverged": None, "compactions": None,
        "tokens_estimated": None, "cost_usd": None, "cost_estimated": False, "threads": [],
        "cache_hits": None, "cache_eligible": None, "lost_tokens": None, "lost_usd": None,
    }  # fmt: skip


def _add_clients(db: sqlite_utils.Database, sessions: dict[str, dict]) -> None:
    marks = ",".join("?" for _ in sessions)
    counts: dict[str, Counter] = {}
    for session, ua, n in db.execute(
        f"SELECT session, client, COUNT(*) FROM calls WHERE session IN ({marks}) GROUP BY session, client", list(sessions)
    ).fetchall():
        name = client_name(ua)
        if name:
            counts.setdefault(session, Counter())[name] += n
    for session, c in counts.items():
        sessions[session]["clients"] = [name for name, _ in c.most_common()]


def _add_threads(db: sqlite_utils.Database, sessions: dict[str, dict], cols: frozenset[str]) -> None:
    """Threads per session, flattened from their tree: main threads, each followed by its side
    threads and sub-agents (``depth`` 1, 2, ...). Without ``parent_thread`` the thread with most
    calls is the main one and the others hang under it."""
    marks = ",".join("?" for _ in sessions)
    parent = "MAX(parent_thread)" if "parent_thread" in cols else "NULL"
    rows = db.execute(
        f"""SELECT session, thread, {parent}, COUNT(*), MIN(seq), MAX(started_at), json_group_array(DISTINCT model),
                   SUM(usage_input), SUM(usage_cache_read)
            FROM calls WHERE session IN ({marks}) AND thread IS NOT NULL GROUP BY session, thread ORDER BY MIN(seq)""",
        list(sessions),
    ).fetchall()
    by_session: dict[str, list[dict]] = {}
    for session, thread, parent_thread, n, first_seq, last, models, inp, read in rows:
        by_session.setdefault(session, []).append({
            "thread": thread, "parent_thread": parent_thread if parent_thread != thread else None, "calls": n,
            "first_seq": first_seq, "last_started_at": last, "models": sorted(m for m in json.loads(models) if m),
            "usage_input": inp, "usage_cache_read": read,
        })  # fmt: skip
    for session, threads in by_session.items():
        known = {t["thread"] for t in threads}
        if "parent_thread" not in cols and len(threads) > 1:
            main = max(threads, key=lambda t: (t["calls"], -t["first_seq"]))
            for t in threads:
                t["parent_thread"] = None if t is main else main["thread"]
        children: dict[str | None, list[dict]] = {}
        for t in threads:
            key = t["parent_thread"] if t["parent_thread"] in known else None
            children.setdefault(key, []).append(t)
        flat: list[dict] = []

        def walk(t: dict, depth: int) -> None:
            t["depth"], t["main"] = depth, depth == 0
            flat.append(t)
            for c in children.get(t["thread"], []):
                if c not in flat:
                    walk(c, depth + 1)

        for top in children.get(None, []):
            walk(top, 0)
        sessions[session]["threads"] = flat
