"""Advice per cause, checked against the simulator of a running `ctxscope serve` (the installed
command): for a session with one cache-hostile cause, Anthropic and OpenAI Responses, the top
advice names the cause and its pointer; its predicted saving is at least half of what the session
re-sent without the cause (built independently, not by the advisor) saves in the simulator; and
`advise --verify` agrees with the simulator within 5 points."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support import cause_sessions as cases
from support import sdk_clients
from support.factories import analysed
from support.serve_process import CTXSCOPE, running_serve

TOKEN = "advice-per-cause-token-0123456789abcdef"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with running_serve(tmp, env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (_proc, base):
        yield base
    sdk_clients.close_all()


@pytest.mark.parametrize("provider", cases.PROVIDERS)
@pytest.mark.parametrize("cause", cases.CAUSES)
def test_the_top_advice_removes_the_cause_and_the_simulator_agrees(tmp_path, daemon, provider, cause):
    db = tmp_path / "c.db"
    analysed(db, cases.exchanges(provider, cause, "sess"))
    run = subprocess.run(
        [str(CTXSCOPE), "advise", "sess", "--db", str(db), "--verify", "--daemon", daemon, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, CTXSCOPE_SIM_TOKEN=TOKEN, CTXSCOPE_HOME=str(tmp_path / "home")),
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    top = data["top"]
    want_cause, want_pointer = cases.expected(provider, cause)
    assert (top["cause"], top["pointer"]) == (want_cause, want_pointer), data["advices"]
    assert data["advice"].startswith(top["change"])

    sent, fixed = (cases.resent(daemon, TOKEN, provider, cause, fixed=f) for f in (False, True))
    removed = 100 * (sent - fixed) / sent
    assert removed > 10, (sent, fixed)  # the cause costs something in the simulator
    assert top["saving_pct"] >= removed / 2, (top["saving_pct"], removed)

    v = data["verify"]
    assert v["top"] == want_cause and v["best_simulated"]["cache_read"] > v["as_sent"]["cache_read"], v
    assert v["error_pts"] <= 5, v

    zero_read = [a for a in data["alternatives"] if a["cache_read"] == 0]
    if any(a["cache_read"] > 0 for a in data["alternatives"]):  # a placement that reads nothing is never advised
        assert data["best"] not in {a["name"] for a in zero_read}
        assert all(a["cause"] != "placement" or a["what_if_cache_read"] > 0 for a in data["advices"])
