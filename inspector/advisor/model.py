"""A session as the findings and the advisor read it: calls with canonical prompts and token counts.

Pure: built from rows the store gave (``load.py``); token counts are o200k estimates
(``analyses/accounting.py``), so every figure the advisor gives is in those units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxscope.inspector.analyses.accounting import TokenBreakdown, TokenCounter
from ctxscope.inspector.analyses.cache.loss import LOSS_PRICING
from ctxscope.inspector.analyses.canonical_prompt import KINDS, CanonicalPrompt, Segment
from ctxscope.inspector.analyses.prices import Price, PriceTable, load_prices
from ctxscope.inspector.base.usd import total_usd

# Context windows by model-name fragment (longest fragment wins); the default fits today's
# mid-size models. A window only scales the overflow and oversized-result findings.
WINDOWS = {
    "claude": 200_000,
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "o3": 200_000,
    "o4": 200_000,
}
DEFAULT_WINDOW = 200_000


def window_of(model: str | None) -> int:
    name = (model or "").lower()
    keys = [k for k in WINDOWS if k in name]
    return WINDOWS[max(keys, key=len)] if keys else DEFAULT_WINDOW


KIND_CODE = {kind: chr(ord("a") + i) for i, kind in enumerate(KINDS)}


def kind_codes(segments: Sequence[Segment]) -> str:
    """The segments' kinds, one character each (``?``: a kind not in KINDS)."""
    return "".join(KIND_CODE.get(s.kind, "?") for s in segments)


@dataclass(frozen=True)
class SessionCall:
    """One captured call: the stored facts the findings need, its prompt parsed."""

    id: str
    seq: int
    started_at: float  # unix seconds
    api: str
    model: str | None
    thread: str | None
    scope: str  # the API key's fingerprint: a provider's cache is per key
    usage: dict | None  # {input, output, cache_read, cache_write} as reported
    response: Any  # the final response object (tool calls the model made)
    prompt: CanonicalPrompt
    tokens: TokenBreakdown
    body: Any = None  # the request as sent (``--verify`` re-sends it with another placement)
    compacted: bool = False  # the first call after a compaction: its early change is the compaction's
    provider: str | None = None  # the upstream it went to: the simulator's calls are never priced
    lost_tokens: int | None = None  # the stored loss (``analyses/cache/loss.py``): None when not analysed
    lost_usd: float | None = None
    verdict: str | None = None  # the stored cache verdict whose loss that is
    cache: dict | None = None  # the analysis's stored cache judgement (verdict, lost tokens, break pointer)
    kinds: str | None = None  # each segment's kind, one character (``kind_codes``); None: read the segments

    def last_of(self, kinds: tuple[str, ...]) -> int | None:
        """The index of the prompt's last segment of one of ``kinds``."""
        if self.kinds is not None and len(self.kinds) == len(self.prompt.segments) and set(kinds) <= KIND_CODE.keys():
            last = max((self.kinds.rfind(KIND_CODE[k]) for k in kinds), default=-1)
            return last if last >= 0 else None
        found = [i for i, s in enumerate(self.prompt.segments) if s.kind in kinds]
        return found[-1] if found else None

    @property
    def family(self) -> str:
        head = self.api.split(".", 1)[0]
        return head if head in ("anthropic", "openai") else "unknown"


@dataclass(frozen=True)
class Session:
    id: str
    calls: tuple[SessionCall, ...]  # the calls whose prompt parsed, by seq
    skipped: int  # calls without a prompt we could read (no body, unknown API)
    prices: PriceTable
    # a call's request body (parsed) by id, read when asked: a session rebuilt from shapes reads the
    # bodies a what-if needs one at a time through it (None: the calls carry theirs)
    bodies: Callable[[str], Any] | None = field(default=None, compare=False, repr=False)

    def price(self, call: SessionCall) -> Price | None:
        """The rates of this call: its model at its date and prompt size; None when unpriced."""
        return call_price(self.prices, call)

    def threads(self) -> dict[str, list[SessionCall]]:
        """Calls per thread (a call without one is its own), in order."""
        out: dict[str, list[SessionCall]] = {}
        for call in self.calls:
            out.setdefault(call.thread or call.id, []).append(call)
        return out


def build_session(
    session: str, rows: list[dict], *, prices: PriceTable | None = None, counter: TokenCounter | None = None
) -> Session:
    """A ``Session`` from the store's rows (``store/session_calls.py``); started_at as unix seconds."""
    from ctxscope.inspector.analyses.canonical import canonicalize  # the body path only: its parsers' imports

    counter = counter or TokenCounter()
    calls, skipped = [], 0
    for row in rows:
        prompt = canonicalize(row.get("api"), row.get("body"))
        if prompt is None or row.get("api") is None or (row.get("body") or {}).get("messages") == []:
            skipped += 1
            continue
        stored = row.get("cache")
        cache: dict = stored if isinstance(stored, dict) else {}
        calls.append(
            SessionCall(
                id=row["id"],
                seq=row["seq"],
                started_at=float(row["started_at"]),
                api=row["api"],
                model=prompt.model or row.get("model"),
                thread=row.get("thread"),
                scope=row.get("key_fingerprint") or "",
                usage=row.get("usage"),
                response=row.get("response"),
                prompt=prompt,
                tokens=counter.count_prompt(prompt),
                body=row.get("body"),
                compacted=bool(row.get("has_compaction_before")),
                provider=row.get("provider"),
                lost_tokens=cache.get("lost_tokens"),
                lost_usd=cache.get("lost_cost_usd"),
                verdict=cache.get("verdict"),
                cache=row["cache"] if isinstance(row.get("cache"), dict) else None,
            )
        )
    return Session(session, tuple(calls), skipped, prices or load_prices())


def session_loss(session: Session) -> dict:
    """The session's tokens and dollars lost, summed from the stored per-call loss (the one loss
    figure, ``analyses/cache/loss.py``): the same as ``sessions`` and ``stats`` show."""
    return {
        "tokens": sum(c.lost_tokens or 0 for c in session.calls),
        "usd": total_usd(c.lost_usd for c in session.calls),
        "pricing": LOSS_PRICING,
    }


def call_price(prices: PriceTable, call: SessionCall) -> Price | None:
    """One call's rates (``prices.PriceTable.quote``: date, tier, the simulator's rule)."""
    size = (call.usage or {}).get("input")
    return prices.lookup(
        call.model,
        call.started_at,
        prompt_tokens=size if isinstance(size, int) else call.tokens.total,
        provider=call.provider,
    )


def dollars(tokens: float, rate_per_million: float | None) -> float | None:
    return None if rate_per_million is None else round(tokens * rate_per_million / 1e6, 6)
