"""The advice held-out check with the sessions captured by the INSTALLED `ctxscope serve`, not
stored by hand: real SDKs send each cause's session (a timestamp in the system prompt, the tools
reordered once, Claude Code's billing header) through the daemon to an independent fake provider
(a third-party upstream, so the billing header is a break there); then the installed `ctxscope
advise --verify` against the same daemon's simulator. The top advice names the cause and its
pointer, its predicted saving is at least half of what re-sending the session without the cause
saves in the simulator, `--verify` agrees within 5 points, and no placement that reads nothing is
advised while another reads something. (The 6-minute gaps need captured timestamps, which a live
capture cannot fake without sleeping: ``test_advice_per_cause.py`` stores them.)"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ctxscope.inspector.store import queries

from support import cause_sessions as cases
from support import sdk_clients
from support.fake_diagnosing_provider import running_fake_provider
from support.serve_process import CTXSCOPE, running_serve

TOKEN = "advice-through-serve-0123456789abcdef"
CAUSES = ("timestamp", "tool_order", "billing_header")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with running_fake_provider() as (_fake, url):
        (tmp / "ctxscope.toml").write_text(f'[upstreams]\ngateway = "{url}"\n')
        with running_serve(tmp, "--config", str(tmp / "ctxscope.toml"), env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (
            _proc,
            base,
        ):
            yield tmp, base
    sdk_clients.close_all()


def _send(base: str, provider: str, cause: str, label: str) -> None:
    url = f"{base}/s/{label}/u/gateway"
    for body in cases.bodies(provider, cause):
        if provider == "anthropic":
            sdk_clients.Anthropic(base_url=url, api_key="sk-ant-through-serve", max_retries=0).messages.create(**body)
        else:
            sdk_clients.OpenAI(base_url=url + "/v1", api_key="sk-through-serve", max_retries=0).responses.create(**body)


def _wait(db: Path, label: str, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn = queries.open_db(db)
        try:
            rows = queries.list_calls(conn, session=label, limit=None)
        finally:
            conn.conn.close()
        if len(rows) >= n and all(r.get("relation") for r in rows):
            return
        time.sleep(0.1)
    raise AssertionError(f"{label}: expected {n} analysed calls")


@pytest.mark.parametrize("provider", cases.PROVIDERS)
@pytest.mark.parametrize("cause", CAUSES)
def test_advice_on_a_captured_session_removes_the_cause_and_the_simulator_agrees(daemon, provider, cause):
    home, base = daemon
    label = f"{provider}-{cause}"
    _send(base, provider, cause, label)
    _wait(home / "c.db", label, len(cases.bodies(provider, cause)))
    run = subprocess.run(
        [str(CTXSCOPE), "advise", label, "--db", str(home / "c.db"), "--verify", "--daemon", base, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, CTXSCOPE_SIM_TOKEN=TOKEN, CTXSCOPE_HOME=str(home / "home")),
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    top = data["top"]
    assert (top["cause"], top["pointer"]) == cases.expected(provider, cause), data["advices"]

    sent, fixed = (cases.resent(base, TOKEN, provider, cause, fixed=f) for f in (False, True))
    removed = 100 * (sent - fixed) / sent
    assert removed > 10, (sent, fixed)
    assert top["saving_pct"] >= removed / 2, (top["saving_pct"], removed)

    v = data["verify"]
    assert v["top"] == top["cause"] and v["error_pts"] <= 5, v
    if any(a["cache_read"] > 0 for a in data["alternatives"]):
        zero_read = {a["name"] for a in data["alternatives"] if a["cache_read"] == 0}
        assert data["best"] not in zero_read
        assert all(a["cause"] != "placement" or a["what_if_cache_read"] > 0 for a in data["advices"])
