"""The cache advisor: the session replayed under other breakpoint placements, the best one named,
and what to change in the client in one sentence (docs/architecture.md, "The cache advisor").

Anthropic alternatives: the client's placement as sent; the best static placement (breakpoints at
the end of the tools and/or of the system prompt); a moving last-message breakpoint (the
prefix's end, the prompt's last block, and the previous call's last block when it is still there
so the 20-block lookback cannot miss it); the cheapest of those with a 1-hour TTL where a gap
between calls is over 5 minutes; no breakpoints. OpenAI: the routing as sent, and one
``prompt_cache_key`` for the whole session. An alternative that reads nothing from the cache is
never the best while another reads something, nor is one that places the breakpoints as sent.

The placement is one advice among the causes of ``causes.py`` (content that changes, tools
reordered, a billing header, gaps over the TTL); all are ranked by the dollars they save.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from ctxscope.inspector.advisor.causes import AS_SENT, CauseAdvice, cause_advice
from ctxscope.inspector.advisor.findings import Finding, findings
from ctxscope.inspector.advisor.model import Session, SessionCall, session_loss
from ctxscope.inspector.advisor.replay import MAX_BREAKPOINTS, TTL, Placement, Replay, memo, replay
from ctxscope.inspector.analyses.hashes import common_prefix

AlternativeName = Literal["as_sent", "static", "moving", "ttl_1h", "none", "session_key"]

MATERIAL = 0.005  # a placement that saves less than this share of the cost is not worth a change

# One line per alternative, for the CLI and the page's legend.
EXPLANATIONS: dict[str, str] = {
    "as_sent": "the breakpoints (or prompt_cache_key) exactly as the client sent them",
    "static": "fixed breakpoints at the end of the tools and/or the system prompt only",
    "moving": "a breakpoint that follows the conversation: the prefix's end, the last message "
    "and the previous call's last message",
    "ttl_1h": "the cheapest of those with a 1-hour TTL, for gaps between calls over 5 minutes",
    "none": "no breakpoints at all: nothing written, nothing read",
    "session_key": "one prompt_cache_key for every call of the session",
}


@dataclass(frozen=True)
class Alternative:
    name: AlternativeName  # OpenAI: as_sent, session_key
    description: str  # the placement in words
    result: Replay
    placement: Placement | None  # None: OpenAI routing (no breakpoints to place)

    def as_dict(self, baseline: float) -> dict:
        cost = self.result.cost_usd
        saving = round(100 * (baseline - cost) / baseline, 2) if baseline > 0 else 0.0
        return {
            "name": self.name,
            "explanation": EXPLANATIONS[self.name],
            "description": self.description,
            **self.result.as_dict(),
            "saving_pct": saving,
        }


@dataclass(frozen=True)
class Advice:
    session: str
    family: str
    alternatives: tuple[Alternative, ...]  # as_sent first
    best: Alternative  # the best placement (or routing)
    advice: str  # the top advice in one sentence
    causes: tuple[CauseAdvice, ...] = ()  # every advice that saves, the most dollars first
    lost: dict | None = None  # the session's stored loss (``analyses/cache/loss.py``), as ``sessions`` shows it

    @property
    def as_sent(self) -> Alternative:
        return self.alternatives[0]

    @property
    def top(self) -> CauseAdvice | None:
        return self.causes[0] if self.causes else None

    @property
    def predicted_saving_pct(self) -> float:
        return self.top.saving_pct if self.top else 0.0

    def as_dict(self) -> dict:
        base = self.as_sent.result.cost_usd
        return {
            "session": self.session,
            "family": self.family,
            "calls": len(self.as_sent.result.calls),
            "as_sent": self.as_sent.result.as_dict(),
            "advices": [c.as_dict() for c in self.causes],
            "top": self.top.as_dict() if self.top else None,
            "alternatives": [a.as_dict(base) for a in self.alternatives],
            "best": self.best.name,
            "predicted_saving_pct": self.predicted_saving_pct,
            "advice": self.advice,
            "units": "o200k estimate tokens; USD at the price table's rates",
            "lost": self.lost,
        }


def _last(call: SessionCall, kinds: tuple[str, ...]) -> int | None:
    return call.last_of(kinds)


def _fixed(*where: str, ttl: str = "5m") -> Placement:
    def place(_i: int, call: SessionCall) -> dict[int, str]:
        spots = {
            "tools": _last(call, ("tools",)),
            "system": _last(call, ("system",)),
            "prefix": _last(call, ("tools", "system")),
        }
        return {i: ttl for w in where if (i := spots[w]) is not None}

    return place


def _moving(calls: tuple[SessionCall, ...], prefix_ttl: str = "5m", ttl: str = "5m") -> Placement:
    """The prefix's end, the last block, and the previous call's last block in the same thread."""
    previous: dict[str, SessionCall] = {}
    before: dict[str, SessionCall | None] = {}
    for call in calls:
        before[call.id] = previous.get(call.thread or call.id)
        previous[call.thread or call.id] = call

    def place(_i: int, call: SessionCall) -> dict[int, str]:
        out: dict[int, str] = {}
        prefix = _last(call, ("tools", "system"))
        if prefix is not None:
            out[prefix] = prefix_ttl
        last = len(call.prompt.segments) - 1
        prev = before.get(call.id)
        if prev is not None:
            end = len(prev.prompt.segments) - 1
            if 0 <= end < last and common_prefix(prev.prompt.hashes, call.prompt.hashes) > end:
                out[end] = ttl
        if last >= 0:
            out[last] = ttl
        return out

    return place


def _with_ttl(placement: Placement, ttl: str) -> Placement:
    return lambda i, call: dict.fromkeys(placement(i, call), ttl)


def _name(call: SessionCall, index: int) -> str:
    """A segment in the words of the advice: system[1], the last tool, the last message, messages[3]."""
    seg = call.prompt.segments[index]
    if index == len(call.prompt.segments) - 1 and seg.kind not in ("tools", "system"):
        return "the last message"
    if seg.kind == "tools" and index == _last(call, ("tools",)):
        return "the last tool"
    if seg.kind == "system" and index == _last(call, ("system",)):
        return "the system prompt"
    parts = seg.pointer.strip("/").split("/")
    return f"{parts[0]}[{parts[1]}]" if len(parts) > 1 else parts[0]


def _describe(calls: tuple[SessionCall, ...], placement: Placement) -> str:
    """The placement on the latest call that has one (the first may be too short to show it)."""
    for i, call in reversed(list(enumerate(calls))):
        points = placement(i, call)
        if points:
            names = [f"{_name(call, p)}{' (1h)' if t == '1h' else ''}" for p, t in sorted(points.items())]
            return ", ".join(dict.fromkeys(names))
    return "no breakpoints"


def advise(session: Session, found: list[Finding] | None = None) -> Advice | None:
    """The advice for the session's main provider family, None when it has no prompt we can read
    (``found``: the session's findings, when the caller has them already)."""
    with memo():
        return _advise(session, found)


def _advise(session: Session, found: list[Finding] | None) -> Advice | None:
    families = [c.family for c in session.calls if c.family != "unknown"]
    if not families:
        return None
    family = max(set(families), key=families.count)
    calls = tuple(c for c in session.calls if c.family == family and not c.prompt.server_state)
    if not calls:
        return None
    placed = _openai(session, calls) if family == "openai" else _anthropic(session, calls)
    tries = [(a.description, a.placement) for a in placed.alternatives[1:] if a.placement and a.name != "none"]
    found = findings(session) if found is None else found
    ranked = [*cause_advice(session, calls, family, found, tries)]
    best = placed.best
    if best is not placed.as_sent and best.result.cost_usd < placed.as_sent.result.cost_usd:
        ranked.append(_as_advice(calls, placed, best))
    ranked.sort(key=lambda a: -a.saving_usd)
    ttl = [a for a in ranked if a.cause == "ttl_gaps"]
    ranked = [a for a in ranked if a.cause != "ttl_gaps" or a is ttl[0]]  # one TTL advice: the better
    sentence = f"{ranked[0].change}: −{ranked[0].saving_pct:.0f}% input cost" if ranked else placed.advice
    return dataclasses.replace(placed, causes=tuple(ranked), advice=sentence)


def _as_advice(calls: tuple[SessionCall, ...], placed: Advice, best: Alternative) -> CauseAdvice:
    """The best placement (or routing) as one advice among the causes."""
    sent = placed.as_sent
    if best.placement is None:  # OpenAI routing
        route: Callable[[SessionCall], str] = lambda _c: placed.session  # noqa: E731
        return CauseAdvice(
            "routing",
            "/prompt_cache_key",
            _sentence(sent, best).split(":")[0],
            sent.description,
            best.description,
            calls,
            AS_SENT,
            route,
            best.result,
            sent.result,
        )
    last = calls[-1]
    points = sorted(best.placement(len(calls) - 1, last))
    pointer = last.prompt.segments[points[0]].pointer if points else None
    change = _sentence(sent, best).rsplit(":", 1)[0]
    cause = "placement"
    if best.name == "ttl_1h":  # the gaps are the cause; the placement says where the 1h markers go
        gaps = [b.started_at - a.started_at for a, b in itertools.pairwise(calls)]
        longest = f"{max(gaps) / 60:.0f} min"
        cause, change = "ttl_gaps", f"gaps between calls of up to {longest} outlive the 5-minute cache; {change}"
    return CauseAdvice(
        cause,
        pointer,
        change,
        sent.description,
        best.description,
        calls,
        best.placement,
        None,
        best.result,
        sent.result,
    )


def _pick(alts: list[Alternative]) -> Alternative:
    """The cheapest alternative that reads from the cache when any does, and places differently."""
    sent = alts[0]
    reading = [a for a in alts if a.result.cache_read > 0]
    same = [c.breakpoints for c in sent.result.calls]
    eligible = [
        a
        for a in (reading or alts)
        if a is sent
        or (
            [c.breakpoints for c in a.result.calls] != same
            and a.description != sent.description
            and a.result.cost_usd < sent.result.cost_usd * (1 - MATERIAL)
        )
    ]
    if sent not in eligible:
        eligible.append(sent)
    return min(eligible, key=lambda a: (round(a.result.cost_usd, 9), a.name != "as_sent"))


def _anthropic(session: Session, calls: tuple[SessionCall, ...]) -> Advice:
    alts = [_alt(session, calls, "as_sent", AS_SENT)]
    statics = [
        _alt(session, calls, "static", _fixed(*w))
        for n in (1, 2)
        for w in itertools.combinations(("tools", "system"), n)
    ]
    alts.append(min(statics, key=lambda a: a.result.cost_usd))
    alts.append(_alt(session, calls, "moving", _moving(calls)))
    gaps = [b.started_at - a.started_at for a, b in itertools.pairwise(calls)]
    if any(TTL["5m"] < g <= TTL["1h"] for g in gaps):
        longer = [
            _alt(session, calls, "ttl_1h", _with_ttl(_fixed("prefix"), "1h")),
            _alt(session, calls, "ttl_1h", _moving(calls, prefix_ttl="1h")),
            _alt(session, calls, "ttl_1h", _with_ttl(_moving(calls), "1h")),
        ]
        alts.append(min(longer, key=lambda a: a.result.cost_usd))
    alts.append(_alt(session, calls, "none", lambda _i, _c: {}))
    best = _pick(alts)
    return Advice(session.id, "anthropic", tuple(alts), best, _sentence(alts[0], best), lost=session_loss(session))


def _alt(session: Session, calls: tuple[SessionCall, ...], name: AlternativeName, placement: Placement) -> Alternative:
    bounded: Placement = lambda i, call: _at_most(placement(i, call))  # noqa: E731
    words = _describe(calls, bounded)
    if name in ("moving", "ttl_1h") and "the last message" in words:  # the trailing one is the previous call's end
        head, _, _ = words.partition("the last message")
        parts = [p for p in head.rstrip(", ").split(", ") if p and not p.startswith(("messages[", "input["))]
        ttl = " (1h)" if words.endswith("(1h)") else ""
        words = ", ".join([*parts, f"the last message{ttl} and the previous call's last message{ttl}"])
    # ``replay`` keeps the last 4 breakpoints as ``_at_most`` does: as sent, this is the causes'
    # baseline replay, shared through the memo
    replayed = replay(calls, placement if placement is AS_SENT else bounded, session.prices)
    return Alternative(name, words, replayed, bounded)


def _at_most(points: Mapping[int, str]) -> dict[int, str]:
    return dict(sorted(points.items())[-MAX_BREAKPOINTS:])


def _openai(session: Session, calls: tuple[SessionCall, ...]) -> Advice:
    keys = {str(c.prompt.cache_policy.get("prompt_cache_key") or "") for c in calls}
    sent = Alternative(
        "as_sent",
        f"prompt_cache_key: {len(keys)} distinct value(s)",
        replay(calls, lambda _i, _c: {}, session.prices),
        None,
    )
    route: Callable[[SessionCall], str] = lambda _c: session.id  # noqa: E731
    one = Alternative(
        "session_key",
        "one prompt_cache_key for the session",
        replay(calls, lambda _i, _c: {}, session.prices, route=route),
        None,
    )
    best = one if one.result.cost_usd < sent.result.cost_usd else sent
    return Advice(session.id, "openai", (sent, one), best, _sentence(sent, best), lost=session_loss(session))


def _sentence(sent: Alternative, best: Alternative) -> str:
    base = sent.result.cost_usd
    if best is sent or base <= 0 or best.result.cost_usd >= base:
        return "keep the client's cache placement: no alternative costs less"
    pct = f"−{100 * (base - best.result.cost_usd) / base:.0f}% input cost"
    if best.name == "session_key":
        return f"send one prompt_cache_key for the whole session: {pct}"
    if best.name == "none":
        return f"remove the breakpoints at {sent.description}: {pct}"
    if sent.description == "no breakpoints":
        return f"add breakpoints at {best.description}: {pct}"
    return f"move the breakpoints from {sent.description} to {best.description}: {pct}"
