"""Session aggregates and the hit-rate rule, once, for the CLI and the web UI.

One grouped query (per session and model, so a caller can price each model's usage) gives every
figure either side shows; ``fold_sessions`` sums the groups of a session. The CLI's
``list_sessions`` and the UI's sessions page format the same ``SessionAggregate``
(docs/architecture.md, "Hit rate").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ctxscope.inspector.base.usd import total_usd
from ctxscope.inspector.store import totals
from ctxscope.inspector.store.db import Db
from ctxscope.vocab.apis import SIMULATOR_PROVIDER
from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import CacheVerdict, MarkerKind, RelationKind

# Sessions the project makes itself, by the name it gives them, and their purpose: a replay
# (``replay:<id>``), the advisor's check in the simulator, the requests of known clients that are
# no model call. The default session lists leave them out (docs/architecture.md, "Sessions with a
# purpose"). These names are reserved: a client's label spelled so is shown under its purpose too.
REPLAY_PREFIX = "replay:"
VERIFY_SESSION = "advisor-verify"
NON_MODEL_SESSION = "non-model"
_PURPOSES = (
    (REPLAY_PREFIX, "replay", True),
    (VERIFY_SESSION, "advise-verify", False),
    (NON_MODEL_SESSION, "non-model", False),
)
PURPOSE_SQL = " OR ".join(
    f"session GLOB '{name}*'" if prefix else f"session = '{name}'" for name, _, prefix in _PURPOSES
)


def session_purpose(session: str) -> str | None:
    """Why the project made this session (``replay``, ``advise-verify``, ``non-model``), else None."""
    for name, purpose, prefix in _PURPOSES:
        if session.startswith(name) if prefix else session == name:
            return purpose
    return None


# A call that ran tools since its predecessor: a round of an agent loop.
TOOL_ROUND_SQL = f"""instr(COALESCE(markers, ''), '"kind":"{MarkerKind.TOOLS_EXECUTED}"') > 0"""
# A call our agent's sub-agent made: its thread is a declared child, never the session's main thread.
SUBAGENT_SQL = f"""instr(COALESCE(annotations, ''), '"{Annotation.SUBAGENT}"') > 0"""


def is_tool_round(markers: Any) -> bool:
    """``markers`` (a JSON string or its list) hold a tools_executed marker."""
    if isinstance(markers, str):
        return f'"kind":"{MarkerKind.TOOLS_EXECUTED}"' in markers
    return isinstance(markers, list) and any(
        isinstance(m, dict) and m.get("kind") == MarkerKind.TOOLS_EXECUTED for m in markers
    )


def is_subagent_call(annotations: Any) -> bool:
    """``annotations`` (a JSON string or its list of [name, value]) declare a sub-agent's call."""
    if isinstance(annotations, str):
        return f'"{Annotation.SUBAGENT}"' in annotations
    return isinstance(annotations, list) and any(
        isinstance(a, list | tuple) and a and a[0] == Annotation.SUBAGENT for a in annotations
    )


def thread_order(threads: Iterable[Mapping[str, Any]]) -> list[str]:
    """Thread ids, the main thread first, then the side threads by their first call.

    The main thread carries the agent loop: the most tool rounds, then the most calls, then the
    earliest; a short side call (a title, a summary) is a side thread whatever its order, and so is
    a thread a sub-agent declared (docs/architecture.md, "Sessions and threads"). Each thread is a
    mapping with ``thread``, ``tool_rounds``, ``calls``, ``first_seq`` and optionally ``subagent``.
    The CLI, the JSON and every UI page use this."""
    threads = list(threads)
    if not threads:
        return []
    main = max(
        threads,
        key=lambda t: (
            not t.get("subagent"),
            t.get("tool_rounds") or 0,
            t.get("calls") or 0,
            -(t.get("first_seq") or 0),
        ),
    )
    rest = sorted((t for t in threads if t is not main), key=lambda t: t.get("first_seq") or 0)
    return [main["thread"]] + [t["thread"] for t in rest]


# Verdicts under which the call could have read the cache: a hit rate's denominator.
HIT_ELIGIBLE: tuple[CacheVerdict, ...] = (
    CacheVerdict.HIT,
    CacheVerdict.CLIENT_BREAK,
    CacheVerdict.TTL_EXPIRED,
    CacheVerdict.PROVIDER_MISS,
)


@dataclass(frozen=True)
class HitRate:
    """Calls that read the cache over calls that could have (``HIT_ELIGIBLE``)."""

    hits: int
    eligible: int

    @classmethod
    def of(cls, verdicts: list[str | None]) -> HitRate:
        return cls(sum(v == CacheVerdict.HIT for v in verdicts), sum(v in HIT_ELIGIBLE for v in verdicts))

    @property
    def ratio(self) -> float | None:
        return self.hits / self.eligible if self.eligible else None

    def as_report(self) -> dict[str, Any]:
        """The CLI's shape: always there, ``rate`` rounded to 4 places (None without eligible calls)."""
        return {
            "hits": self.hits,
            "eligible": self.eligible,
            "rate": round(self.hits / self.eligible, 4) if self.eligible else None,
        }

    def as_view(self) -> dict[str, Any] | None:
        """The UI's shape: None without eligible calls, else the exact ``ratio``."""
        return {"hits": self.hits, "eligible": self.eligible, "ratio": self.ratio} if self.eligible else None


def hit_rate(hits: int | None, eligible: int | None) -> HitRate:
    return HitRate(hits or 0, eligible or 0)


N = TypeVar("N", int, float)


def _add(a: N | None, b: N | None) -> N | None:
    """SQL's SUM over groups: None only while every part is None."""
    return a if b is None else b if a is None else a + b


@dataclass
class ModelUsage:
    """One model's reported usage within a session, over its non-simulator calls only: what its cost is
    computed from (the simulator is free: its calls are never priced)."""

    model: str | None
    input: int | None
    output: int | None
    cache_read: int | None
    cache_write: int | None


@dataclass
class SessionAggregate:
    """Every figure of one session that the CLI or the UI shows; sums are None when nothing was there."""

    session: str
    calls: int = 0
    first_started_at: str | None = None
    last_started_at: str | None = None
    models: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    session_source: str | None = None
    usage: dict[str, int | None] = field(
        default_factory=lambda: {"input": None, "output": None, "cache_read": None, "cache_write": None}
    )
    reported_calls: int = 0
    errors: int = 0
    breaks: int | None = None
    diverged: int | None = None
    compactions: int | None = None
    tokens_estimated: int | None = None
    hits: int | None = None
    eligible: int | None = None
    lost_tokens: int | None = None
    lost_usd: float | None = None
    by_model: list[ModelUsage] = field(default_factory=list)  # the priced calls' usage: no simulator call

    @property
    def purpose(self) -> str | None:
        return session_purpose(self.session)

    @property
    def hit_rate(self) -> HitRate:
        return hit_rate(self.hits, self.eligible)


def session_groups(db: Db, *, limit: int | None = None, purposes: bool = False) -> list[tuple[Any, ...]]:
    """One row per (session, model, simulated or not) of the ``limit`` most recently active sessions:
    the simulator's calls are kept apart so that they are never priced. ``purposes``: the sessions
    the project made itself too (``session_purpose``). Read from the per-session totals
    (store/totals.py): a few rows per session, whatever its number of calls."""
    src = totals.source(db)

    def count(column: str, condition: str) -> str:
        """SUM(condition) over the calls, as SQL sums a comparison: NULL where ``column`` is."""
        return f"SUM(CASE WHEN t.{column} IS NOT NULL THEN ({condition}) * t.calls END)"

    eligible = ", ".join(f"'{v}'" for v in HIT_ELIGIBLE)
    extra = [
        count("verdict", f"t.verdict = '{CacheVerdict.CLIENT_BREAK}'"),
        count("relation", f"t.relation = '{RelationKind.DIVERGED}'"),
        "SUM(t.compactions)",
        "SUM(t.tokens_estimated)",
        count("verdict", f"t.verdict = '{CacheVerdict.HIT}'"),
        count("verdict", f"t.verdict IN ({eligible})"),
        "SUM(t.lost_tokens)",
        "SUM(t.lost_usd)",
        "MAX(t.session_source)",
    ]
    own = "" if purposes else f"WHERE NOT ({PURPOSE_SQL})"
    sql = f"""
      WITH recent AS (SELECT session, MAX(last_started_at) AS last FROM {src} {own}
                      GROUP BY session ORDER BY last DESC LIMIT ?)
      SELECT t.session, t.model, SUM(t.calls), MIN(t.first_started_at), MAX(t.last_started_at),
             SUM(t.usage_input), SUM(t.usage_output), SUM(t.usage_cache_read), SUM(t.usage_cache_write),
             SUM(t.reported), SUM(t.errors),
             json_group_array(DISTINCT t.provider), {", ".join(extra)}, t.provider IS '{SIMULATOR_PROVIDER}'
      FROM {src} t JOIN recent r ON r.session = t.session
      GROUP BY t.session, t.model, t.provider IS '{SIMULATOR_PROVIDER}'"""
    return db.execute(sql, [-1 if limit is None else limit]).fetchall()


def fold_sessions(groups: list[tuple[Any, ...]]) -> list[SessionAggregate]:
    """Sum the (session, model) groups of each session; most recently active first."""
    sessions: dict[str, SessionAggregate] = {}
    for row in groups:
        (
            session,
            model,
            n,
            first,
            last,
            inp,
            out,
            read,
            write,
            reported,
            errors,
            providers,
            breaks,
            diverged,
            compactions,
            estimated,
            hits,
            eligible,
            lost,
            lost_usd,
            source,
            simulated,
        ) = row
        s = sessions.setdefault(session, SessionAggregate(session))
        s.calls += n
        s.first_started_at = min(filter(None, [s.first_started_at, first]), default=None)
        s.last_started_at = max(filter(None, [s.last_started_at, last]), default=None)
        if model and model not in s.models:
            s.models.append(model)
        s.providers = sorted({*s.providers, *(p for p in json.loads(providers) if p is not None)})
        s.session_source = max(filter(None, [s.session_source, source]), default=None)
        for key, value in (("input", inp), ("output", out), ("cache_read", read), ("cache_write", write)):
            s.usage[key] = _add(s.usage[key], value)
        s.reported_calls += reported or 0
        s.errors += errors or 0
        s.breaks = _add(s.breaks, breaks)
        s.diverged = _add(s.diverged, diverged)
        s.compactions = _add(s.compactions, compactions)
        s.tokens_estimated = _add(s.tokens_estimated, estimated)
        s.hits = _add(s.hits, hits)
        s.eligible = _add(s.eligible, eligible)
        s.lost_tokens = _add(s.lost_tokens, lost)
        s.lost_usd = _add(s.lost_usd, lost_usd)
        if not simulated:
            s.by_model.append(ModelUsage(model, inp, out, read, write))
    for s in sessions.values():
        s.models.sort()
        s.lost_usd = total_usd([s.lost_usd])  # the one loss figure, rounded as every figure shows it
    return sorted(sessions.values(), key=lambda s: s.last_started_at or "", reverse=True)


def session_aggregates(db: Db, *, limit: int | None = None, purposes: bool = False) -> list[SessionAggregate]:
    """The ``limit`` most recently active sessions with every aggregate, most recent first;
    ``purposes``: with the sessions the project made itself."""
    return fold_sessions(session_groups(db, limit=limit, purposes=purposes))
