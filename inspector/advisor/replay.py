"""The providers' cache rules, replayed over a session's prompts with a chosen breakpoint placement.

An independent model of the rules (docs/architecture.md, "The cache advisor"), written from the
providers' documentation, not from the simulator's code: ``--verify`` checks it against the
simulator, and a shared misreading cannot hide.

Anthropic: at most 4 breakpoints; each breakpoint's prefix is an entry once it reaches the model's
minimum; a breakpoint reads the furthest live entry at most 20 blocks before it; entries live 5
minutes or 1 hour from their last use, measured with the real gaps between the calls; a read
restarts the TTL. Reads cost the read price, writes the write price of their TTL, the rest the
input price. OpenAI: the longest common prefix with an earlier live prompt of the same key and
routing (``prompt_cache_key``) is read, from 1,024 tokens in 128-token steps, or up to the end of
a block marked ``prompt_cache_breakpoint`` (exactly; ``prompt_cache_options.mode: explicit`` keeps
only those); an entry lives as long as ``analyses/cache/openai_retention.py`` says (5 minutes in
memory); nothing is written at a surcharge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from ctxscope.inspector.advisor.model import SessionCall, call_price, dollars
from ctxscope.inspector.analyses.cache.memory import prefix_keys
from ctxscope.inspector.analyses.cache.openai_retention import openai_ttl_seconds
from ctxscope.inspector.analyses.cache.prediction import anthropic_minimum
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.prices import Price, PriceTable

MAX_BREAKPOINTS = 4
LOOKBACK = 20
TTL = {"5m": 300.0, "1h": 3600.0}
OPENAI_MINIMUM, OPENAI_STEP = 1024, 128

# call index, the call -> {segment index: ttl}
Placement = Callable[[int, SessionCall], Mapping[int, str]]
Routing = Callable[[SessionCall], str]  # the call -> the prompt_cache_key it is routed by


@dataclass(frozen=True)
class CallCost:
    call_id: str
    input: int  # tokens billed at the input price
    cache_read: int
    cache_write: int
    cost_usd: float
    breakpoints: tuple[int, ...]  # segment indices used


@dataclass
class Write:
    """An entry a call wrote: paid for if a later call read it before it expired."""

    call_id: str
    pointer: str
    tokens: int  # the tokens this entry added to the cache (what its write cost)
    ttl: str
    surcharge_usd: float  # its write price over the input price
    read: bool = False


@dataclass
class Replay:
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float = 0.0
    calls: list[CallCost] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "input": self.input,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cost_usd": round(self.cost_usd, 6),
        }

    def unpaid(self) -> list[Write]:
        return [w for w in self.writes if not w.read]


@dataclass
class _Entry:
    expires: float
    ttl: float
    write: Write


class _Memo:
    """What one advice's replays compute again and again of the same calls: each prompt's prefix
    keys (hashing a long prompt's digests is the replay's main cost) and each call's rates. Active
    only inside ``memo()``: the writer's replay (``call_facts.py``) keeps nothing."""

    def __init__(self) -> None:
        # prompt id -> (the prompt, held so the id stays its own; its keys by segment index)
        self.keys: dict[int, tuple[object, dict[int, bytes]]] = {}
        self.prices: dict[tuple, Price | None] = {}
        # (calls, placement, route) -> their replay: the baseline of the causes and the placements'
        # "as sent" are one replay; the objects are held so their ids stay theirs
        self.replays: dict[tuple[int, int, int, int], tuple[object, Replay]] = {}


_memo: _Memo | None = None


@contextmanager
def memo() -> Iterator[None]:
    """Remember prefix keys and rates across the replays inside (one advice's)."""
    global _memo
    outer, _memo = _memo, _Memo()
    try:
        yield
    finally:
        _memo = outer


@lru_cache(maxsize=256)
def _minimum(model: str | None) -> int:
    """``anthropic_minimum`` once a model (a replay asks it for every call)."""
    return anthropic_minimum(model)


def _keys(prompt: CanonicalPrompt, wanted: set[int]) -> dict[int, bytes]:
    if _memo is None:
        return prefix_keys(prompt, wanted)
    held = _memo.keys.get(id(prompt))
    if held is None:
        held = _memo.keys[id(prompt)] = (prompt, {})
    known = held[1]
    missing = wanted - known.keys()
    if missing:
        known.update(prefix_keys(prompt, missing))
    return known


def _price(prices: PriceTable, call: SessionCall) -> Price | None:
    if _memo is None:
        return call_price(prices, call)
    size = (call.usage or {}).get("input")
    key = (id(prices), call.model, call.started_at, size if isinstance(size, int) else call.tokens.total, call.provider)
    if key not in _memo.prices:
        _memo.prices[key] = call_price(prices, call)
    return _memo.prices[key]


def replay(
    calls: Sequence[SessionCall], placement: Placement, prices: PriceTable, *, route: Routing | None = None
) -> Replay:
    """The session's input, cache-read and cache-write tokens and cost under ``placement`` (Anthropic)
    and ``route`` (OpenAI's ``prompt_cache_key``; default: as sent)."""
    if _memo is None:
        return _replay(calls, placement, prices, route)
    key = (id(calls), id(placement), id(route), id(prices))
    held = _memo.replays.get(key)
    if held is None:
        held = _memo.replays[key] = ((calls, placement, route, prices), _replay(calls, placement, prices, route))
    return held[1]


def _replay(calls: Sequence[SessionCall], placement: Placement, prices: PriceTable, route: Routing | None) -> Replay:
    out = Replay()
    anthropic: dict[str, dict[bytes, _Entry]] = {}
    openai: dict[tuple[str, str], list[tuple[float, SessionCall]]] = {}
    for i, call in enumerate(calls):
        price = _price(prices, call)
        if call.family == "anthropic":
            cost = _anthropic(call, dict(placement(i, call)), anthropic.setdefault(call.scope, {}), price, out)
        else:
            key = route(call) if route else str(call.prompt.cache_policy.get("prompt_cache_key") or "")
            cost = _openai(call, (call.scope, key), openai, price)
        out.calls.append(cost)
        out.input += cost.input
        out.cache_read += cost.cache_read
        out.cache_write += cost.cache_write
        out.cost_usd += cost.cost_usd
    return out


def _anthropic(
    call: SessionCall, points: dict[int, str], live: dict[bytes, _Entry], price: Price | None, out: Replay
) -> CallCost:
    now = call.started_at
    cum = call.tokens.cumulative
    total = call.tokens.total
    chosen = sorted(p for p in points if 0 <= p < len(cum))[-MAX_BREAKPOINTS:]
    minimum = _minimum(call.model)
    valid = [p for p in chosen if cum[p] >= minimum]
    keys = _keys(call.prompt, {q for p in valid for q in range(max(0, p - LOOKBACK), p + 1)})
    read_end = -1
    for p in valid:
        for q in range(p, max(-1, p - LOOKBACK - 1), -1):
            entry = live.get(keys[q])
            if entry is not None and entry.expires > now:
                read_end = max(read_end, q)
                break
    if read_end >= 0:
        entry = live[keys[read_end]]
        entry.write.read = True
        ttl = max(TTL[points[p]] for p in valid if p >= read_end)
        entry.ttl = max(entry.ttl, ttl)
        entry.expires = now + entry.ttl
    boundary = cum[read_end] if read_end >= 0 else 0
    write_tokens, write_cost = 0, 0.0
    for p in valid:
        if p <= read_end:
            continue
        ttl_name = points[p] if points[p] in TTL else "5m"
        tokens = cum[p] - boundary
        boundary = cum[p]
        rate = price.write_rate(ttl_name) if price else None
        old = live.get(keys[p])
        if old is not None and old.expires > now:
            continue
        write = Write(
            call.id,
            call.prompt.segments[p].pointer,
            tokens,
            ttl_name,
            (dollars(tokens, rate - price.input) or 0.0) if price and rate is not None else 0.0,
        )
        out.writes.append(write)
        live[keys[p]] = _Entry(now + TTL[ttl_name], TTL[ttl_name], write)
        write_tokens += tokens
        write_cost += dollars(tokens, rate) or 0.0
    read = cum[read_end] if read_end >= 0 else 0
    uncached = max(0, total - read - write_tokens)
    cost = write_cost
    if price:
        cost += (dollars(read, price.cache_read) or 0.0) + (dollars(uncached, price.input) or 0.0)
    return CallCost(call.id, uncached, read, write_tokens, cost, tuple(chosen))


def _openai_policy(call: SessionCall) -> tuple[float, bool]:
    """How long what ``call`` writes lives, and whether it has only explicit boundaries."""
    policy = call.prompt.cache_policy
    options = policy.get("prompt_cache_options")
    options = options if isinstance(options, dict) else {}
    return openai_ttl_seconds(policy), options.get("mode") == "explicit"


def _openai_read(entry: SessionCall, call: SessionCall) -> int:
    """Tokens of ``call`` read from what ``entry`` wrote: a rounded common prefix, or an explicit end."""
    shared = _common_segments(entry, call)
    cum = call.tokens.cumulative
    explicit = [cum[i] for i in range(shared) if entry.prompt.segments[i].breakpoint and cum[i] >= OPENAI_MINIMUM]
    best = max(explicit, default=0)
    if not _openai_policy(entry)[1]:
        common = call.tokens.prefix_tokens(shared)
        if common >= OPENAI_MINIMUM:
            best = max(best, OPENAI_MINIMUM + (common - OPENAI_MINIMUM) // OPENAI_STEP * OPENAI_STEP)
    return best


def _openai(
    call: SessionCall,
    route: tuple[str, str],
    live: dict[tuple[str, str], list[tuple[float, SessionCall]]],
    price: Price | None,
) -> CallCost:
    now = call.started_at
    entries = [(t, c) for t, c in live.get(route, []) if t > now and c.model == call.model]
    read = max((_openai_read(c, call) for _, c in entries), default=0)
    live[route] = [*entries[-7:], (now + _openai_policy(call)[0], call)]
    uncached = call.tokens.total - read
    cost = (dollars(read, price.cache_read) or 0.0) + (dollars(uncached, price.input) or 0.0) if price else 0.0
    return CallCost(call.id, uncached, read, 0, cost, ())


def _common_segments(a: SessionCall, b: SessionCall) -> int:
    """How many segments ``b`` shares with ``a`` from the start."""
    n = 0
    for x, y in zip(a.prompt.hashes, b.prompt.hashes, strict=False):
        if x != y:
            break
        n += 1
    return n
