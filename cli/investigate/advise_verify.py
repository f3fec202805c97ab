"""`advise --verify`: the session re-sent as sent and as the top advice rewrites it (Anthropic or
OpenAI) through the built-in simulator over HTTP (a running daemon's /u/sim), at the calls' own
times (docs/architecture.md, "The cache advisor"). The advisor's rules never import the
simulator: this checks one against the other.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import click

from ctxscope.inspector.advisor.alternatives import Advice
from ctxscope.inspector.advisor.body_whatif import bodies_in_order
from ctxscope.inspector.advisor.causes import AS_SENT
from ctxscope.inspector.advisor.model import Session, SessionCall, dollars
from ctxscope.inspector.advisor.replay import Placement
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


ENDPOINTS = {"anthropic": "/v1/messages", "openai.chat": "/v1/chat/completions", "openai.responses": "/v1/responses"}


def _endpoint(call: SessionCall) -> str | None:
    if call.family == "anthropic":
        return ENDPOINTS["anthropic"]
    return next((path for api, path in ENDPOINTS.items() if call.api.startswith(api)), None)


def _post(url: str, body: dict) -> dict:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    try:
        conn.request(
            "POST",
            parts.path,
            body=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                "x-api-key": VERIFY_KEY,
                "authorization": f"Bearer {VERIFY_KEY}",
                "anthropic-version": "2023-06-01",
            },
        )
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    if resp.status >= 400:
        raise click.ClickException(f"the simulator refused a replayed request: HTTP {resp.status}: {raw[:300]!r}")
    return json.loads(raw)


def _figures(usage: dict) -> tuple[int, int, int, int]:
    """Uncached input, cache read, cache write (of which 1h) from either provider's usage."""
    if "prompt_tokens" in usage or "input_tokens_details" in usage:  # OpenAI: cached tokens are inside input
        total = int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        read = int(details.get("cached_tokens") or 0)
        return total - read, read, 0, 0
    write = int(usage.get("cache_creation_input_tokens") or 0)
    w1h = int((usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens") or 0)
    return int(usage.get("input_tokens") or 0), int(usage.get("cache_read_input_tokens") or 0), write, w1h


def _cost(session: Session, call: SessionCall, usage: dict) -> tuple[float, dict[str, int]]:
    price = session.price(call)
    inp, read, write, w1h = _figures(usage)
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


def _request(
    call: SessionCall, sent: dict, i: int, placement: Placement, route: Callable[[SessionCall], str] | None
) -> dict:
    """The body the simulator gets: the what-if's (``sent``), its breakpoints placed, unstreamed."""
    if call.family == "anthropic":
        points = placement(i, call)
        return with_placement(sent, {call.prompt.segments[p].pointer: t for p, t in points.items()})
    body = {k: v for k, v in sent.items() if k not in ("stream", "stream_options")}
    if route is not None:
        body["prompt_cache_key"] = route(call)
    return body


def simulate(
    url: str,
    control: SimulatorControl,
    session: Session,
    calls: Sequence[SessionCall],
    placement: Placement,
    route: Callable[[SessionCall], str] | None = None,
    provider_itself: bool = True,
    progress: Callable[[int, int], None] | None = None,
    rewrite: Callable[[int, SessionCall], Any] | None = None,
) -> dict[str, Any]:
    """One version of the session replayed in the simulator: its reported tokens and their cost
    (``progress(done, total)`` after each call). ``provider_itself``: False plays an upstream that
    keys Claude Code's billing header as text. Calls made from shapes carry no body: each is read
    as sent (``session.bodies``) and ``rewrite`` made the what-if's, one body at a time, in order."""
    sendable = [c for c in calls if _endpoint(c)]
    control.reset()
    total = {"input": 0, "cache_read": 0, "cache_write": 0, "cost_usd": 0.0}
    played = control.config().get("provider_itself", True)
    control.config(provider_itself=provider_itself)
    try:
        for i, (call, body) in enumerate(bodies_in_order(session, sendable)):
            if body is not None and call.body is None and rewrite is not None:
                body = rewrite(i, dataclasses.replace(call, body=body))
            if not isinstance(body, dict):
                if progress is not None:
                    progress(i + 1, len(sendable))
                continue
            endpoint = url.rstrip("/") + f"/s/{VERIFY_LABEL}/u/sim{_endpoint(call)}"
            control.config(clock=call.started_at)
            answer = _post(endpoint, _request(call, body, i, placement, route))
            del body
            cost, figures = _cost(session, call, answer.get("usage") or {})
            for k, n in figures.items():
                total[k] += n
            total["cost_usd"] += cost
            if progress is not None:
                progress(i + 1, len(sendable))
    finally:
        control.config(clock=None, provider_itself=played)
    total["cost_usd"] = round(total["cost_usd"], 6)
    return total


def verify_advice(
    url: str,
    session: Session,
    advice: Advice,
    token: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The predicted and the simulated saving of the top advice over the session as sent: both
    versions re-sent through the simulator (``token``: the simulator's, else CTXSCOPE_SIM_TOKEN or
    the daemon's token file)."""
    top = advice.top
    control = SimulatorControl(url.rstrip("/") + "/u/sim", token or _token())
    as_sent = [c for c in session.calls if c.family == advice.family and not c.prompt.server_state]
    # The billing header is a cause only where the session's upstream keyed it as prompt text: the
    # simulator then plays such an upstream, not Anthropic's own API (simulator/model/prompt.py).
    itself = not any(a.cause == "billing_header" for a in advice.causes)
    try:
        sent = simulate(url, control, session, as_sent, AS_SENT, provider_itself=itself, progress=progress)
        fixed = (
            sent
            if top is None
            else simulate(
                url,
                control,
                session,
                top.calls,
                top.placement,
                top.route,
                provider_itself=itself,
                progress=progress,
                rewrite=top.rewrite,
            )
        )
    except (SimulatorControlError, OSError) as exc:
        raise click.ClickException(f"cannot replay through the simulator at {url}: {exc}") from exc
    simulated = round(100 * (sent["cost_usd"] - fixed["cost_usd"]) / sent["cost_usd"], 2) if sent["cost_usd"] else 0.0
    return {
        "best": advice.best.name,
        "top": top.cause if top else None,
        "as_sent": sent,
        "best_simulated": fixed,
        "predicted_saving_pct": advice.predicted_saving_pct,
        "simulated_saving_pct": simulated,
        "error_pts": round(abs(advice.predicted_saving_pct - simulated), 2),
        "captured_as": VERIFY_LABEL,
    }
