"""`advise --verify`: the session re-sent as sent and with the best placement through the built-in
simulator over HTTP (a running daemon's /u/sim), at the calls' own times (docs/architecture.md,
"The cache advisor"). The advisor's rules never import the simulator: this checks one against the other.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

import click

from ctxscope.inspector.advisor.alternatives import Advice, Alternative
from ctxscope.inspector.advisor.model import Session, SessionCall, dollars
from ctxscope.inspector.advisor.rewrite import with_placement
from ctxscope.inspector.store.sessions import VERIFY_SESSION
from ctxscope.simulator.control.client import SimulatorControl, SimulatorControlError
from ctxscope.simulator.control.token import TOKEN_ENV, TOKEN_FILE

from ..settings import home_dir

VERIFY_LABEL = VERIFY_SESSION  # the replayed calls are captured as this session, a purpose's: out of the lists
VERIFY_KEY = "advisor-verify-key"  # one key: the simulator's cache is per key, like the provider's


def _token() -> str:
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    path = home_dir() / TOKEN_FILE
    if not path.exists():
        raise click.ClickException(f"no simulator token at {path}: is `ctxscope serve` running?")
    return path.read_text().strip()


def _post(url: str, body: dict) -> dict:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    try:
        conn.request(
            "POST",
            parts.path,
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-api-key": VERIFY_KEY, "anthropic-version": "2023-06-01"},
        )
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    if resp.status >= 400:
        raise click.ClickException(f"the simulator refused a replayed request: HTTP {resp.status}: {raw[:300]!r}")
    return json.loads(raw)


def _cost(session: Session, call: SessionCall, usage: dict) -> tuple[float, dict[str, int]]:
    price = session.price(call)
    inp, read = int(usage.get("input_tokens") or 0), int(usage.get("cache_read_input_tokens") or 0)
    write = int(usage.get("cache_creation_input_tokens") or 0)
    w1h = int((usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens") or 0)
    figures = {"input": inp, "cache_read": read, "cache_write": write}
    if price is None:
        return 0.0, figures
    cost = sum(
        dollars(n, rate) or 0.0
        for n, rate in (
            (inp, price.input),
            (read, price.cache_read),
            (write - w1h, price.cache_write),
            (w1h, price.write_rate("1h")),
        )
    )
    return cost, figures


def simulate(url: str, control: SimulatorControl, session: Session, alt: Alternative) -> dict[str, Any]:
    """One alternative replayed in the simulator: its reported tokens and their cost."""
    assert alt.placement is not None
    calls = [c for c in session.calls if c.family == "anthropic" and isinstance(c.body, dict)]
    control.reset()
    total = {"input": 0, "cache_read": 0, "cache_write": 0, "cost_usd": 0.0}
    endpoint = url.rstrip("/") + f"/s/{VERIFY_LABEL}/u/sim/v1/messages"
    try:
        for i, call in enumerate(calls):
            points = alt.placement(i, call)
            body = with_placement(call.body, {call.prompt.segments[p].pointer: t for p, t in points.items()})
            control.config(clock=call.started_at)
            cost, figures = _cost(session, call, _post(endpoint, body).get("usage") or {})
            for k, n in figures.items():
                total[k] += n
            total["cost_usd"] += cost
    finally:
        control.config(clock=None)
    total["cost_usd"] = round(total["cost_usd"], 6)
    return total


def verify_advice(url: str, session: Session, advice: Advice, token: str | None = None) -> dict[str, Any]:
    """The predicted and the simulated saving of the best alternative over the client's placement
    (``token``: the simulator's, else CTXSCOPE_SIM_TOKEN or the daemon's token file)."""
    if advice.family != "anthropic":
        raise click.ClickException("--verify replays Anthropic sessions (OpenAI routing has no simulator model)")
    control = SimulatorControl(url.rstrip("/") + "/u/sim", token or _token())
    try:
        sent = simulate(url, control, session, advice.as_sent)
        best = sent if advice.best is advice.as_sent else simulate(url, control, session, advice.best)
    except (SimulatorControlError, OSError) as exc:
        raise click.ClickException(f"cannot replay through the simulator at {url}: {exc}") from exc
    simulated = round(100 * (sent["cost_usd"] - best["cost_usd"]) / sent["cost_usd"], 2) if sent["cost_usd"] else 0.0
    return {
        "best": advice.best.name,
        "as_sent": sent,
        "best_simulated": best,
        "predicted_saving_pct": advice.predicted_saving_pct,
        "simulated_saving_pct": simulated,
        "error_pts": round(abs(advice.predicted_saving_pct - simulated), 2),
        "captured_as": VERIFY_LABEL,
    }
