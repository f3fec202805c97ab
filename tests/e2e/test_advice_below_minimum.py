"""Advice for a prefix below the provider's minimum cacheable length, checked with `advise --verify`
(the INSTALLED command) against the simulator of a running `ctxscope serve`: a breakpoint whose
prefix is below the model's minimum, in a prompt that reaches it, gets the advice that names it and
a saving the simulator confirms within 5 points; a session below the minimum everywhere gets no
advice with a saving, for Anthropic and OpenAI Responses (never a false saving)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support import sdk_clients
from support.factories import analysed, make_exchange
from support.inspector_bodies import EPHEMERAL, long_text, text
from support.serve_process import CTXSCOPE, running_serve

TOKEN = "below-minimum-token-0123456789abcdef"
T0 = 1_760_000_000.0
CALLS = 8


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with running_serve(tmp, env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (_proc, base):
        yield base
    sdk_clients.close_all()


def _anthropic(i: int, result_words: int) -> dict:
    """Call ``i`` of an agent whose only breakpoint is on a short system prompt (about 300 tokens)."""
    messages: list[dict] = [{"role": "user", "content": [text("Fix the failing test.")]}]
    for j in range(i):
        messages.append({"role": "assistant", "content": [text(f"Reading part {j}.")]})
        messages.append({"role": "user", "content": [text(long_text(result_words, f"part{j}x"))]})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": [text(long_text(300, "rules"), cache_control=dict(EPHEMERAL))],
        "messages": messages,
    }


def _responses(i: int) -> dict:
    items: list[dict] = [{"role": "user", "content": "Fix the failing test."}]
    for j in range(i):
        items.append({"role": "user", "content": f"And part {j}."})
    return {"model": "gpt-5", "instructions": long_text(200, "rules"), "input": items, "store": False}


def _advise(tmp_path, daemon: str, bodies: list[dict], provider: str) -> dict:
    db = tmp_path / "c.db"
    path = "/v1/messages" if provider == "anthropic" else "/v1/responses"
    analysed(
        db,
        [
            make_exchange(
                request=b,
                started_at=T0 + 20 * i,
                session_label="short",
                provider=provider,
                path=path,
                upstream="https://api.anthropic.com" if provider == "anthropic" else "https://api.openai.com",
            )
            for i, b in enumerate(bodies)
        ],
    )
    run = subprocess.run(
        [str(CTXSCOPE), "advise", "short", "--db", str(db), "--verify", "--daemon", daemon, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, CTXSCOPE_SIM_TOKEN=TOKEN, CTXSCOPE_HOME=str(tmp_path / "home")),
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_breakpoint_below_the_minimum_is_named_and_its_saving_verified(tmp_path, daemon):
    data = _advise(tmp_path, daemon, [_anthropic(i, 400) for i in range(CALLS)], "anthropic")
    top = data["top"]
    assert (top["cause"], top["pointer"]) == ("below_minimum", "/system/0"), data["advices"]
    assert "1024-token minimum" in top["change"] and top["saving_pct"] > 20, top
    v = data["verify"]
    assert v["as_sent"]["cache_read"] == 0 and v["best_simulated"]["cache_read"] > 0, v
    assert v["error_pts"] <= 5, v


@pytest.mark.parametrize("provider", ["anthropic", "responses"])
def test_a_session_below_the_minimum_everywhere_gets_no_saving(tmp_path, daemon, provider):
    if provider == "anthropic":
        bodies = [_anthropic(i, 10) for i in range(CALLS)]  # at most ~850 tokens: below 1,024 throughout
    else:
        bodies = [_responses(i) for i in range(CALLS)]
    data = _advise(tmp_path, daemon, bodies, "anthropic" if provider == "anthropic" else "openai")
    assert not [a for a in data["advices"] if a["saving_usd"] > 0], data["advices"]
    assert all(a["cache_read"] == 0 for a in data["alternatives"]), data["alternatives"]
