"""Findings: what wastes a session's context, each with the tokens and dollars at stake and a pointer
to the evidence (docs/architecture.md, "Findings").

Seven kinds: unused tools, oversized tool results, duplicate content, overflow risk, cache-hostile
churn, breakpoints that never pay and per-request metadata that breaks a third party's cache. One
finding per cause, each listing the calls it concerns, the most dollars first. Assembled from each
call's stored facts (``call_facts.py``) with no body read (``assemble``); ``findings`` takes the
facts of a session in memory first. Tokens are o200k estimates; dollars price them at the call's
model's input rate (what the tokens cost when not read from cache) at its date, except unpaid
breakpoints (the write surcharge) and churn and metadata breaks, which sum the loss the analysis
stored for each breaking call: the one loss figure (``analyses/cache/loss.py``), so their tokens
and dollars are those of ``sessions`` and ``stats``; a call with two causes counts its loss under
its earliest one. A breakpoint's write is unpaid only once its TTL has run out unread: until then a
next call may still read it.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

from ctxscope.inspector.advisor.call_facts import OVERSIZED_SHARE, OVERSIZED_TOKENS, CallFacts, FactsTaker
from ctxscope.inspector.advisor.churn import METADATA, Cause
from ctxscope.inspector.advisor.model import Session, SessionCall, dollars, window_of
from ctxscope.inspector.advisor.replay import TTL
from ctxscope.inspector.advisor.session_replay import SessionReplay
from ctxscope.inspector.analyses.prices import Price, PriceTable
from ctxscope.inspector.analyses.prompt_metadata import KNOWN_BLOCKS
from ctxscope.inspector.base.usd import total_usd

OVERFLOW_SHARE = 0.8  # a context at or above this share of the window is at risk

KINDS = (
    "unused_tools",
    "oversized_tool_result",
    "duplicate_content",
    "overflow_risk",
    "cache_churn",
    "unpaid_breakpoint",
    "per_request_metadata",
)


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    summary: str  # one line, our words (captured text only in ``evidence``)
    tokens: int  # at stake over the session
    usd: float | None
    calls: tuple[str, ...]  # the calls it concerns (the UI badges them)
    evidence: dict = field(default_factory=dict)  # call id and pointer(s) to look at

    def as_dict(self) -> dict:
        return asdict(self) | {"calls": list(self.calls)}


def findings(session: Session, *, now: float | None = None) -> list[Finding]:
    """Every finding of a session held in memory, the most dollars at stake first."""
    return assemble(session_facts(session), session.prices, now=now)


def session_facts(session: Session, taker: FactsTaker | None = None) -> list[CallFacts]:
    """Each parsed call's facts, taken in order as the writer takes them when it stores the calls."""
    taker = taker or FactsTaker()
    replay = SessionReplay(session.prices)
    last: dict[str, SessionCall] = {}
    out = []
    for call in session.calls:
        thread = call.thread or call.id
        out.append(taker.take(session.id, call, last.get(thread), replay))
        last[thread] = call
    return out


def assemble(facts: Sequence[CallFacts], prices: PriceTable, *, now: float | None = None) -> list[Finding]:
    """The findings of a session from its calls' facts (in order; skipped calls are ignored), the
    most dollars at stake first. ``now`` (unix seconds, default the clock) decides which cache
    writes have expired unread."""
    calls = [f for f in facts if not f.skip]
    threads: dict[str, list[CallFacts]] = {}
    for f in calls:
        threads.setdefault(f.thread, []).append(f)
    rates = _Rates(prices)
    out = [
        *_unused_tools(calls, rates),
        *_oversized(threads, rates),
        *_duplicates(calls, rates),
        *_overflow(threads, rates),
        *_churn(threads, rates),
        *_metadata_breaks(threads, rates),
        *_unpaid(calls, rates, time.time() if now is None else now),
    ]
    return sorted(out, key=lambda f: (-(f.usd or 0.0), -f.tokens, f.kind))


def by_call(found: list[Finding]) -> dict[str, list[str]]:
    """Call id -> the kinds of the findings that concern it (for badges)."""
    out: dict[str, list[str]] = defaultdict(list)
    for f in found:
        for call in f.calls:
            if f.kind not in out[call]:
                out[call].append(f.kind)
    return dict(out)


class _Rates:
    """Each call's rates: its model at its date and prompt size, and the simulator's rule
    (``analyses/prices.py``)."""

    def __init__(self, prices: PriceTable):
        self.prices = prices
        self._known: dict[tuple, Price | None] = {}  # a call is priced once, not once per tool it declares

    def price(self, f: CallFacts) -> Price | None:
        key = (f.model, f.at, f.size, f.provider)
        if key not in self._known:
            self._known[key] = self.prices.lookup(f.model, f.at, prompt_tokens=f.size or None, provider=f.provider)
        return self._known[key]

    def input(self, f: CallFacts) -> float | None:
        price = self.price(f)
        return price.input if price else None


def _unused_tools(calls: list[CallFacts], rates: _Rates) -> list[Finding]:
    """One finding for every tool declared on each call that declares tools and never called."""
    with_tools = [f for f in calls if f.tools is not None]
    if not with_tools:
        return []
    declared = [{t[0] for t in f.tools or ()} for f in with_tools]
    called = {name for f in calls for name in f.called}
    unused = sorted(set.intersection(*declared) - called)
    if not unused:
        return []
    per_tool = []
    for name in unused:
        tokens, usd, first = 0, [], None
        for f in with_tools:
            _, pointer, n = next(t for t in f.tools or () if t[0] == name)
            first = first or (f.id, pointer, n)
            tokens += n
            usd.append(dollars(n, rates.input(f)))
        assert first is not None
        per_tool.append(
            {
                "tool": name,
                "call": first[0],
                "pointer": first[1],
                "tokens_per_call": first[2],
                "tokens": tokens,
                "usd": total_usd(usd),
            }
        )
    per_call = sum(t["tokens_per_call"] for t in per_tool)
    names = ", ".join(t["tool"] for t in per_tool)
    return [
        Finding(
            "unused_tools",
            f"{len(unused)} tool(s) declared on all {len(with_tools)} calls and never called ({names}): "
            f"~{per_call} tokens x {len(with_tools)} calls",
            sum(t["tokens"] for t in per_tool),
            total_usd(t["usd"] for t in per_tool),
            tuple(f.id for f in with_tools),
            {
                "tools": unused,
                "per_tool": per_tool,
                "call": per_tool[0]["call"],
                "pointer": per_tool[0]["pointer"],
                "pointers": [t["pointer"] for t in per_tool],
                "tokens_per_call": per_call,
                "calls": len(with_tools),
            },
        )
    ]


def _oversized(threads: dict[str, list[CallFacts]], rates: _Rates) -> list[Finding]:
    out = []
    for calls in threads.values():
        holders: dict[str, list[int]] = defaultdict(list)  # a large result's hash -> the calls holding it
        for n, f in enumerate(calls):
            for h in {b[0] for b in f.big}:
                holders[h].append(n)
        seen: set[str] = set()
        for n, f in enumerate(calls):
            limit = min(OVERSIZED_TOKENS, int(OVERSIZED_SHARE * window_of(f.model)))
            for h, pointer, tokens, ref in f.big:
                if tokens < limit or h in seen:
                    continue
                seen.add(h)
                later = [calls[k] for k in holders[h] if k > n]
                if not later:
                    continue
                out.append(
                    Finding(
                        "oversized_tool_result",
                        f"a {tokens}-token tool result stays in the context for {len(later)} more call(s)",
                        tokens * len(later),
                        total_usd(dollars(tokens, rates.input(c)) for c in later),
                        (f.id, *(c.id for c in later)),
                        {
                            "call": f.id,
                            "pointer": pointer,
                            "tokens": tokens,
                            "more_calls": len(later),
                            "tool_call_id": ref,
                        },
                    )
                )
    return out


def _duplicates(calls: list[CallFacts], rates: _Rates) -> list[Finding]:
    groups: dict[str, dict] = {}
    for f in calls:
        for digest, tokens, pointers in f.dups:
            g = groups.setdefault(
                digest, {"calls": [], "tokens": 0, "usd": [], "first": (f.id, pointers), "size": tokens}
            )
            g["calls"].append(f.id)
            g["tokens"] += tokens * (len(pointers) - 1)
            g["usd"].append(dollars(tokens * (len(pointers) - 1), rates.input(f)))
    return [
        Finding(
            "duplicate_content",
            f"the same {g['size']}-token text appears {len(g['first'][1])} times in one prompt, "
            f"on {len(g['calls'])} call(s)",
            g["tokens"],
            total_usd(g["usd"]),
            tuple(g["calls"]),
            {"call": g["first"][0], "pointers": g["first"][1], "tokens": g["size"]},
        )
        for g in groups.values()
    ]


def _overflow(threads: dict[str, list[CallFacts]], rates: _Rates) -> list[Finding]:
    out = []
    for calls in threads.values():
        last = calls[-1]
        window = window_of(last.model)
        size = last.size
        if size < OVERFLOW_SHARE * window:
            continue
        recent = calls[-5:]
        rate = (size - recent[0].size) / (len(recent) - 1) if len(recent) > 1 else 0.0
        left = math.ceil((window - size) / rate) if rate > 0 and size < window else (0 if size >= window else None)
        when = f"overflows in ~{left} call(s) at +{rate:.0f} tokens/call" if left is not None else "not growing"
        out.append(
            Finding(
                "overflow_risk",
                f"context at {size / window:.0%} of the {window}-token window; {when}",
                size,
                dollars(size, rates.input(last)),
                (last.id,),
                {
                    "call": last.id,
                    "tokens": size,
                    "window": window,
                    "growth_per_call": round(rate, 1),
                    "calls_left": left,
                },
            )
        )
    return out


def _cause_losses(
    threads: dict[str, list[CallFacts]], rates: _Rates
) -> Iterator[tuple[CallFacts, Cause, int, float | None]]:
    """Each call's causes with the loss each counts: the one the analysis stored for the call
    (a client break's), under its earliest cause (the cache broke there); a call stored without it
    (never analysed) is estimated from the cause's position at the input rate less the read rate."""
    for calls in threads.values():
        for f in calls:
            for n, cause in enumerate(f.churn):
                if n:
                    yield f, cause, 0, None
                elif f.lost_tokens is not None:
                    yield f, cause, f.lost_tokens, f.lost_usd
                else:
                    price = rates.price(f)
                    yield f, cause, cause.lost, dollars(cause.lost, price.input - price.cache_read) if price else None


def _churn(threads: dict[str, list[CallFacts]], rates: _Rates) -> list[Finding]:
    """One finding per cause (where and how the early prefix changes); a call with two causes is
    listed under both. A change that cost nothing (the cache had expired, or only beside an earlier
    change) is no finding."""
    groups: dict[tuple[str, str], dict] = {}
    for f, cause, lost, usd in _cause_losses(threads, rates):
        if cause.how.startswith(METADATA):
            continue
        g = groups.setdefault((cause.pointer, cause.how), {"calls": [], "tokens": 0, "usd": [], "evidence": None})
        g["calls"].append(f.id)
        g["tokens"] += lost
        g["usd"].append(usd)
        if g["evidence"] is None:
            g["evidence"] = {
                "call": f.id,
                "previous": f.prev,
                "pointer": cause.pointer,
                "segment": cause.segment,
                "reordered": cause.how == "reordered",
                "offset": cause.offset,
                "before": cause.before,
                "after": cause.after,
            }
    out = []
    for (pointer, how), g in groups.items():
        if not g["tokens"]:
            continue
        what = "tools reordered" if how == "reordered" else f"{g['evidence']['segment']} changes"
        out.append(
            Finding(
                "cache_churn",
                f"{what} at {pointer} (char {g['evidence']['offset']}) on {len(g['calls'])} call(s), "
                f"~{g['tokens']} tokens not read from cache",
                g["tokens"],
                total_usd(g["usd"]),
                tuple(g["calls"]),
                g["evidence"],
            )
        )
    return out


def _metadata_breaks(threads: dict[str, list[CallFacts]], rates: _Rates) -> list[Finding]:
    """Breaks inside a per-request metadata block, where the upstream keys its cache on it
    (``analyses/prompt_metadata.py``), with the client's setting that drops it. To the provider
    itself the analysis masks the block: no break, no loss, no finding."""
    groups: dict[str, dict] = {}
    for f, cause, lost, usd in _cause_losses(threads, rates):
        if not cause.how.startswith(METADATA):
            continue
        g = groups.setdefault(cause.how.removeprefix(METADATA), {"calls": [], "tokens": 0, "usd": [], "evidence": None})
        g["calls"].append(f.id)
        g["tokens"] += lost
        g["usd"].append(usd)
        g["evidence"] = g["evidence"] or {
            "call": f.id,
            "previous": f.prev,
            "pointer": cause.pointer,
            "block": cause.how,
        }
    out = []
    for name, g in groups.items():
        block = next((b for b in KNOWN_BLOCKS if b.name == name), None)
        if not g["tokens"] or block is None:
            continue
        g["evidence"]["block"] = name
        out.append(
            Finding(
                "per_request_metadata",
                f"{name} changes on every request and this upstream caches on it: {len(g['calls'])} break(s), "
                f"~{g['tokens']} tokens not read from cache; set {block.fix}",
                g["tokens"],
                total_usd(g["usd"]),
                tuple(g["calls"]),
                g["evidence"],
            )
        )
    return out


def _unpaid(calls: list[CallFacts], rates: _Rates, now: float) -> list[Finding]:
    """Cache writes no later call read before their TTL ran out (one still live may yet be read)."""
    read = {(f.read[0], f.read[1]) for f in calls if f.read is not None}
    groups: dict[str, list[tuple[CallFacts, int, str]]] = defaultdict(list)
    for f in calls:
        for pointer, tokens, ttl, _key in f.writes:
            if (f.id, pointer) not in read and f.at + TTL.get(ttl, TTL["5m"]) <= now:
                groups[pointer].append((f, tokens, ttl))
    out = []
    for pointer, ws in groups.items():
        usd = []
        for f, tokens, ttl in ws:
            price = rates.price(f)
            rate = price.write_rate(ttl) if price else None
            usd.append(dollars(tokens, rate - price.input) if price and rate is not None else None)
        out.append(
            Finding(
                "unpaid_breakpoint",
                f"the breakpoint at {pointer} wrote {sum(t for _, t, _ in ws)} tokens on {len(ws)} "
                "call(s) that no later call read before they expired",
                sum(t for _, t, _ in ws),
                total_usd(usd),
                tuple(f.id for f, _, _ in ws),
                {"call": ws[0][0].id, "pointer": pointer, "ttl": ws[0][2], "writes": len(ws)},
            )
        )
    return out
