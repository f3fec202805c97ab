"""Sums of stored dollar figures, rounded one way: so every view of one figure shows the same number."""

from __future__ import annotations

from collections.abc import Iterable


def total_usd(values: Iterable[float | None]) -> float | None:
    """The sum of stored per-call dollars (the loss of ``analyses/cache/loss.py``) to six places, as
    every figure shows it; None when no call was priced. Every consumer sums through this, so
    ``sessions``, ``stats``, findings, the advisor and the pages agree to the last digit."""
    priced = [v for v in values if v is not None]
    return round(sum(priced), 6) if priced else None
