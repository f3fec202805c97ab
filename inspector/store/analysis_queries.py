"""Read-side queries over the analysis: filtered call listings, a session's timeline, cache stats.

Everything here reads the analysis columns the writer stored (see inspector/pipeline/analyze.py); nothing
recomputes it, so these stay index lookups and aggregates even on large capture files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlite_utils

from ctxscope.inspector.base.usd import total_usd
from ctxscope.inspector.store import queries, totals
from ctxscope.inspector.store.sessions import HIT_ELIGIBLE, NON_MODEL_SESSION, hit_rate
from ctxscope.vocab.kinds import EpochReason, RelationKind

MISS_VERDICTS = ("client_break", "model_switch", "ttl_expired", "provider_miss")


def _pointer_prefix(prefix: str) -> tuple[str, list[Any]]:
    """``/system`` matches /system and everything below it, not /systemx."""
    prefix = prefix.rstrip("/") or "/"
    if prefix == "/":
        return "pointer IS NOT NULL", []
    return "(pointer = ? OR substr(pointer, 1, ?) = ?)", [prefix, len(prefix) + 1, prefix + "/"]


def find_calls(
    db: sqlite_utils.Database,
    *,
    session: str | None = None,
    model: str | None = None,
    relation: str | None = None,
    epoch_reason: str | None = None,
    pointer_prefix: str | None = None,
    verdict: str | None = None,
    thread: str | None = None,
    threads: Sequence[str] | None = None,
    limit: int | None = 50,
    offset: int = 0,
    newest_first: bool = True,
) -> list[dict[str, Any]]:
    """Call summaries (as ``queries.list_calls``) filtered by any analysis field (``threads``: any of them)."""
    where: list[str] = []
    params: list[object] = []
    for col, value in (
        ("session", session),
        ("model", model),
        ("relation", relation and relation.upper()),
        ("epoch_reason", epoch_reason),
        ("cache_verdict", verdict),
        ("thread", thread),
    ):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(value)
    if threads is not None:  # any of these threads (an empty list matches nothing)
        where.append(f"thread IN ({', '.join('?' for _ in threads)})" if threads else "0")
        params += list(threads)
    if pointer_prefix is not None:
        clause, extra = _pointer_prefix(pointer_prefix)
        where.append(clause)
        params += extra
    order = "DESC" if newest_first else "ASC"
    sql = f"SELECT {queries.SUMMARY_COLUMNS} FROM calls"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY started_at {order}, id {order} LIMIT ? OFFSET ?"
    params += [-1 if limit is None else limit, offset]
    return queries.with_thread_parents(db, [queries._summary(r) for r in db.query(sql, params)])


def resolve_session(db: sqlite_utils.Database, session: str) -> str | None:
    """A session id from an id or a unique prefix of one; None if nothing matches."""
    return queries.resolve_prefix(db, "session", session)


def session_timeline(db: sqlite_utils.Database, session: str) -> dict[str, Any] | None:
    """A session's calls in order (seq, time, model, thread, relation, pointer, tokens, verdict,
    markers) with its thread tree and cache stats; None for an unknown session."""
    full = resolve_session(db, session)
    if full is None:
        return None
    calls = queries.list_calls(db, session=full, limit=None, newest_first=False)
    calls.sort(key=lambda c: c["seq"])
    return {
        "session": full,
        "session_source": next((c["session_source"] for c in calls if c.get("session_source")), None),
        "threads": queries.session_threads(db, full),
        "stats": stats(db, session=full),
        "calls": calls,
    }


def stats(db: sqlite_utils.Database, *, session: str | None = None) -> dict[str, Any]:
    """Calls, hit rate (numerator and denominator), breaks by cause, tokens and cost lost, cache discipline.

    Read from the per-session totals (store/totals.py), which split the calls by every value counted
    here: a few rows per session, however many calls it has."""
    # All sessions' figures leave out the non-model requests (docs/architecture.md, "Non-model requests").
    where, params = (
        ("WHERE session = ?", [session]) if session is not None else ("WHERE session != ?", [NON_MODEL_SESSION])
    )
    src = totals.source(db)
    one = db.execute(
        f"""SELECT COALESCE(SUM(calls), 0), SUM((relation IS NOT NULL) * calls), SUM((verdict = 'hit') * calls),
                   SUM((verdict IN ({", ".join("?" for _ in HIT_ELIGIBLE)})) * calls),
                   SUM(usage_input), SUM(usage_cache_read), SUM(usage_cache_write),
                   SUM(lost_tokens), SUM(lost_usd), COUNT(DISTINCT session), COUNT(DISTINCT thread),
                   SUM(compactions)
            FROM {src} {where}""",
        [*HIT_ELIGIBLE, *params],
    ).fetchone()
    calls, analysed, hits, eligible, inp, read, write, lost, lost_usd, sessions, threads, compactions = one
    by_relation = _counts(db, src, "COALESCE(relation || ':' || epoch_reason, relation)", where, params)
    by_verdict = _counts(db, src, "verdict", where, params)
    breaks = _breaks(db, src, where, params)
    return {
        "session": session,
        "calls": calls,
        "analysed": analysed or 0,
        "sessions": sessions,
        "threads": threads,
        "hit_rate": hit_rate(hits, eligible).as_report(),
        "token_hit_rate": {
            "cache_read": read or 0,
            "input": inp or 0,
            "rate": round((read or 0) / inp, 4) if inp else None,
        },
        "cache_write_tokens": write or 0,
        "by_relation": by_relation,
        "by_verdict": by_verdict,
        "breaks": breaks,
        "lost_tokens": lost or 0,
        "lost_usd": total_usd([lost_usd]),  # the one loss figure (analyses/cache/loss.py)
        "compactions": compactions or 0,
        "cache_discipline": cache_discipline(db, session=session),
        "provider_agreement": provider_agreement_counts(db, where, params, per_session=session is None),
    }


def _agreement_report(counts: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {k: counts.get(k, 0) for k in ("agree", "disagree", "pending", "none")}
    judged = out["agree"] + out["disagree"]
    out["rate"] = round(out["agree"] / judged, 4) if judged else None  # of the calls with a diagnosis
    return out


def provider_agreement_counts(
    db: sqlite_utils.Database, where: str, params: list[Any], *, per_session: bool
) -> dict[str, Any]:
    """The provider's cache diagnosis held against ours (docs/architecture.md, "Cache
    verdicts"): agree / disagree / pending / none over the calls with a cache verdict, and the
    agreement rate of those the provider diagnosed; ``per_session`` adds each session that had one."""
    rows = db.execute(
        f"SELECT session, agreement, SUM(calls) FROM {totals.source(db)} {where}"
        f" {'AND' if where else 'WHERE'} agreement IS NOT NULL GROUP BY 1, 2",
        params,
    ).fetchall()
    overall: dict[str, int] = {}
    sessions: dict[str, dict[str, int]] = {}
    for sid, word, n in rows:
        overall[word] = overall.get(word, 0) + n
        sessions.setdefault(sid, {})[word] = n
    report = _agreement_report(overall)
    if per_session:
        report["by_session"] = {sid: _agreement_report(c) for sid, c in sessions.items() if any(k != "none" for k in c)}
    return report


def _counts(db: sqlite_utils.Database, src: str, expr: str, where: str, params: list[Any]) -> dict[str, Any]:
    rows = db.execute(
        f"SELECT {expr}, SUM(calls) FROM {src} {where} {'AND' if where else 'WHERE'} {expr} IS NOT NULL"
        " GROUP BY 1 ORDER BY 2 DESC",
        params,
    ).fetchall()
    return dict(rows)


def _breaks(db: sqlite_utils.Database, src: str, where: str, params: list[Any]) -> list[dict[str, Any]]:
    """Cache misses grouped by cause: verdict, the kind of segment that broke, and where it lies
    (the totals keep the kind and the pointer's top-level part of a client break)."""
    rows = db.execute(
        f"""SELECT verdict, break_kind, break_area, SUM(calls), SUM(lost_tokens), SUM(lost_usd)
            FROM {src} {where} {"AND" if where else "WHERE"}
            verdict IN ({", ".join("?" for _ in MISS_VERDICTS)}) GROUP BY 1, 2, 3""",
        [*params, *MISS_VERDICTS],
    )
    groups = [
        {
            "cause": verdict,
            "segment_kind": kind,
            "area": area,
            "calls": n,
            "lost_tokens": lost or 0,
            "lost_usd": total_usd([usd]),
        }
        for verdict, kind, area, n, lost, usd in rows
    ]
    return sorted(groups, key=lambda g: (-g["lost_tokens"], -g["calls"], str(g["cause"])))


# Calls whose relation says nothing about the client's discipline: the first of a thread, a restart.
_NOT_JUDGED = (
    f"relation IS NULL OR relation = '{RelationKind.NOT_COMPARABLE}'"
    f" OR COALESCE(epoch_reason, '') IN ('{EpochReason.SESSION_START}', '{EpochReason.THREAD_START}',"
    f" '{EpochReason.CAPTURE_RESUMED}')"
)
_COMPACTION = """(has_compaction_before = 1 OR instr(markers, '"kind":"checkpoint_request"') > 0)"""
_INSIDE = "json_extract(cache, '$.before_prev_last_breakpoint') = 1"


def cache_discipline(db: sqlite_utils.Database, *, session: str | None = None) -> dict[str, Any]:
    """How well the prompt prefix was kept: the share of calls after a thread's first that are
    APPEND_ONLY or IDENTICAL, the breaks (every other relation) and what they cost, and the breaks
    that are neither a compaction (its checkpoint request or the first call after it) nor behind
    the previous call's last cache breakpoint: ``violations``, which a careful client keeps at 0.

    The figures come from the per-session totals (store/totals.py: ``compaction`` and ``inside`` are
    the two conditions of a call); the listed break calls are read through the relation index."""
    where = f"WHERE NOT ({_NOT_JUDGED})" + (" AND session = ?" if session is not None else "")
    params = [session] if session is not None else []
    broke = "relation NOT IN ('APPEND_ONLY', 'IDENTICAL')"
    row = db.execute(
        f"""SELECT SUM(calls), SUM((relation IN ('APPEND_ONLY', 'IDENTICAL')) * calls),
                   SUM(({broke}) * calls),
                   SUM(({broke} AND compaction) * calls),
                   SUM(({broke} AND NOT compaction AND inside) * calls),
                   SUM(CASE WHEN {broke} THEN COALESCE(lost_tokens, 0) END),
                   SUM(CASE WHEN {broke} AND compaction THEN COALESCE(lost_tokens, 0) END),
                   SUM(CASE WHEN {broke} THEN compactions END)
            FROM {totals.source(db)} {where}""",
        params,
    ).fetchone()
    comparable, kept, breaks, compactions, violations, lost, lost_compaction, after = (v or 0 for v in row)
    relations = [
        r[0] for r in db.execute(f"SELECT DISTINCT relation FROM {totals.source(db)} {where} AND {broke}", params)
    ]
    listed = []
    if relations:  # the breaking relations by name: the relation index finds their calls, not a scan
        listed = db.execute(
            f"""SELECT id, session, seq, relation, epoch_reason, pointer, {_COMPACTION}, {_INSIDE}, cache_lost_tokens
                FROM calls {where} AND relation IN ({", ".join("?" for _ in relations)})
                ORDER BY NOT {_COMPACTION} AND {_INSIDE} DESC, started_at LIMIT 50""",
            [*params, *relations],
        ).fetchall()
    return {
        "comparable": comparable,
        "prefix_kept": kept,
        "prefix_kept_share": round(kept / comparable, 4) if comparable else None,
        "breaks": breaks,
        "compaction_breaks": compactions,
        # of those: the first call after a compaction (what the sessions list counts as a compaction),
        # and the rest, the checkpoint requests themselves
        "breaks_after_compaction": after,
        "checkpoint_request_breaks": compactions - after,
        "violations": violations,
        "lost_tokens": lost,
        "lost_tokens_compactions": lost_compaction,
        "break_calls": [
            {
                "id": r[0],
                "session": r[1],
                "seq": r[2],
                "relation": r[3],
                "epoch_reason": r[4],
                "pointer": r[5],
                "compaction": bool(r[6]),
                "inside_cached_prefix": bool(r[7]),
                "lost_tokens": r[8] or 0,
            }
            for r in listed
        ],
    }
