"""Tokens and dollars lost to a cache miss: the one definition every figure of ctxscope reads.

docs/architecture.md, "Cache verdicts". **Tokens lost** at a break (or an expired or missed
cache) are the tokens the predecessor had cached that this call could not read, in the
provider's own units (``verdicts.verdict`` works them out against the reported usage). **Dollars
lost** are what those tokens cost beyond the cache read they would have been: each is paid again
at the rate the provider actually charged for it, the cache-write rate (of the call's TTL) for
the tokens the call wrote back to the cache and the plain input rate for the rest, minus the
cache-read rate. That is the difference on the user's bill between this call and the hit it
could have been, which is what a user reading "lost" expects. For OpenAI and Gemini (no write
surcharge) the write rate is the input rate, so both readings agree there.

The analysis computes it once per call and stores it (``cache_lost_tokens``, ``cache_lost_usd``);
sessions, stats, findings, the advisor, replay and every page read the stored figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxscope.inspector.analyses.prices import Price, Unpriced
from ctxscope.vocab.figures import LOSS_PRICING

__all__ = ["LOSS_PRICING", "Loss", "priced_loss"]  # LOSS_PRICING: the sentence every legend and tooltip shows


@dataclass(frozen=True)
class Loss:
    tokens: int
    usd: float | None  # None: the call is unpriced (``unpriced`` says why)
    unpriced: str | None = None


def priced_loss(tokens: int, price: Price | Unpriced | None, *, written: int, ttl: str | None) -> Loss:
    """The loss of ``tokens`` lost tokens for a call that wrote ``written`` tokens to the cache."""
    if isinstance(price, Unpriced):
        return Loss(tokens, None, price.reason)
    if price is None:
        return Loss(tokens, None, "no price known")
    rewritten = min(tokens, max(0, written))
    extra = rewritten * max(0.0, price.write_rate(ttl) - price.cache_read) + (tokens - rewritten) * max(
        0.0, price.input - price.cache_read
    )
    return Loss(tokens, round(extra / 1e6, 8))
