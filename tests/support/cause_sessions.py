"""The per-cause sessions of ``bench/advisor_probe/advisor_sessions.py``: one builder for the bench
and the tests, so both measure the same sessions (the bench may not import the tests); and what a
session costs when re-sent through a running daemon's simulator (the held-out checks' yardstick)."""

from __future__ import annotations

import sys
from pathlib import Path

from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.simulator.control.client import SimulatorControl

from support import sdk_clients

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "advisor_probe"))

from advisor_sessions import (
    CAUSES,
    PROVIDERS,
    bodies,
    exchanges,
    expected,
    times,
)

__all__ = ["CAUSES", "PROVIDERS", "bodies", "exchanges", "expected", "resent", "times"]


def _cost(provider: str, usage) -> float:
    """Dollars of one simulated call's prompt, from the usage the SDK parsed."""
    if provider == "anthropic":
        p = load_prices().lookup("claude-sonnet-4-5")
        assert p is not None and p.cache_write_1h is not None
        w1h = (usage.cache_creation.ephemeral_1h_input_tokens or 0) if usage.cache_creation else 0
        w5m = (usage.cache_creation_input_tokens or 0) - w1h
        return (
            usage.input_tokens * p.input
            + (usage.cache_read_input_tokens or 0) * p.cache_read
            + w5m * p.cache_write
            + w1h * p.cache_write_1h
        ) / 1e6
    p = load_prices().lookup("gpt-5")
    assert p is not None
    cached = usage.input_tokens_details.cached_tokens or 0
    return ((usage.input_tokens - cached) * p.input + cached * p.cache_read) / 1e6


def resent(base: str, token: str, provider: str, cause: str, *, fixed: bool) -> float:
    """Dollars of the session's bodies (``fixed``: without the cause) sent through the daemon's
    simulator with the SDK, its clock at each call's time; for the billing header it plays the
    third-party upstream the header went to."""
    control = SimulatorControl(base + "/u/sim", token)
    control.reset()
    control.config(provider_itself=cause != "billing_header")
    url = base + "/s/advice-check/u/sim"
    total = 0.0
    try:
        for body, t in zip(bodies(provider, cause, fixed=fixed), times(cause), strict=True):
            control.config(clock=t)
            if provider == "anthropic":
                client = sdk_clients.Anthropic(base_url=url, api_key="sk-ant-advice-check")
                total += _cost(provider, client.messages.create(**body).usage)
            else:
                client = sdk_clients.OpenAI(base_url=url + "/v1", api_key="sk-advice-check")
                total += _cost(provider, client.responses.create(**body).usage)
    finally:
        control.config(clock=None, provider_itself=True)
    return total
