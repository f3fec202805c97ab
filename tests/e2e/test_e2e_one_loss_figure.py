"""One deliberate break has one loss figure: the same tokens and dollars in `sessions`, `stats`,
`findings`, `advise` (the INSTALLED command) and the daemon's session API, priced by hand from
genai-prices' published rates; the simulator's own calls are never priced, anywhere
(docs/architecture.md, "Cache verdicts")."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from ctxscope.inspector.analyses.prices import SIMULATOR_FREE

from support import sdk_clients
from support.inspector_bodies import EPHEMERAL, claude_code_turns, long_text, text
from support.serve_process import CTXSCOPE, running_serve

KEY = "sk-ant-api03-ONELOSS-0123456789abcdef"
MODEL = "claude-sonnet-4-6"
# genai-prices' rates for claude-sonnet-4-6 (USD per million tokens, below 200k prompt tokens).
INPUT, READ, WRITE_5M = 3.0, 0.3, 3.75


def _cli(tmp_path: Path, *args: str) -> object:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [str(CTXSCOPE), *args, "--db", str(tmp_path / "c.db"), "--json"],
        capture_output=True,
        text=True,
        env=dict(env, CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def _analysed(db: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if db.exists():
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT COUNT(*) FROM calls WHERE cache_verdict IS NOT NULL").fetchone()[0] >= n:
                    return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} analysed calls")


def _send(base: str, route: str, key: str) -> None:
    """Three turns of an agent loop; the third edits the cached system prompt (the deliberate break).
    Each session has a key of its own: a provider's cache is per key, and so is ctxscope's model of it."""
    client = sdk_clients.Anthropic(api_key=key, base_url=base + route, max_retries=0)
    system = [text("You are a coding agent."), text(long_text(1500, "sys"), cache_control=dict(EPHEMERAL))]
    bodies = claude_code_turns(3, system=system, model=MODEL)
    bodies[2]["system"][1]["text"] += " Be terse."
    for body in bodies:
        client.messages.create(**copy.deepcopy(body))


def test_one_break_has_the_same_tokens_and_dollars_everywhere(tmp_path, sim_alone):
    db = tmp_path / "c.db"
    with running_serve(tmp_path, "--upstream", f"anthropic={sim_alone.base_url}") as (_, base):
        _send(base, "/s/paid/anthropic", KEY)  # a provider route: priced
        _send(base, "/s/free/u/sim", KEY + "-sim")  # the daemon's simulator: never priced
        _analysed(db, 6)
        api = base + "/_ctxscope/api"
        web_sessions = {s["session"]: s for s in httpx2.get(api + "/sessions", timeout=30).json()["sessions"]}
        web_session = {s: httpx2.get(api + "/session", params={"s": s}, timeout=30).json() for s in ("paid", "free")}
        web_findings = httpx2.get(api + "/findings", params={"s": "paid"}, timeout=30).json()
        web_advice = httpx2.get(api + "/advice", params={"s": "paid"}, timeout=30).json()

    calls = _cli(tmp_path, "calls")
    assert isinstance(calls, list)
    paid = [c for c in calls if c["session"] == "paid"]
    [brk] = [c for c in paid if c["cache_verdict"] == "client_break"]
    assert brk["pointer"] == "/system/1/text"
    # The stored loss, priced by hand: tokens re-written pay the write rate, the rest the input rate,
    # each minus the read rate they would have paid.
    detail = _cli(tmp_path, "show", brk["id"])
    assert isinstance(detail, dict)
    lost, written = detail["cache"]["lost_tokens"], brk["usage"]["cache_write"]
    assert lost > 1500 and written > 0
    rewritten = min(lost, written)
    exact = (rewritten * (WRITE_5M - READ) + (lost - rewritten) * (INPUT - READ)) / 1e6
    assert detail["cache"]["lost_cost_usd"] == pytest.approx(exact, abs=1e-8)  # stored to 8 places
    usd = round(exact, 6)  # every sum of it is shown to 6

    sessions = {s["session"]: s for s in _cli(tmp_path, "sessions")}  # type: ignore[union-attr]
    stats = _cli(tmp_path, "stats", "--session", "paid")
    found = _cli(tmp_path, "findings", "paid")
    advised = _cli(tmp_path, "advise", "paid")
    assert isinstance(stats, dict) and isinstance(found, dict) and isinstance(advised, dict)
    [churn] = [f for f in found["findings"] if f["kind"] == "cache_churn"]
    [web_churn] = [f for f in web_findings["findings"] if f["kind"] == "cache_churn"]
    figures = {
        "sessions": (sessions["paid"]["lost_tokens"], sessions["paid"]["lost_usd"]),
        "stats": (stats["lost_tokens"], stats["lost_usd"]),
        "stats by cause": (stats["breaks"][0]["lost_tokens"], stats["breaks"][0]["lost_usd"]),
        "findings": (churn["tokens"], churn["usd"]),
        "advise": (advised["lost"]["tokens"], advised["lost"]["usd"]),
        "api sessions": (web_sessions["paid"]["lost_tokens"], web_sessions["paid"]["lost_usd"]),
        "api session": (web_session["paid"]["summary"]["lost_tokens"], web_session["paid"]["summary"]["lost_usd"]),
        "api findings": (web_churn["tokens"], web_churn["usd"]),
        "api advice": (web_advice["advice"]["lost"]["tokens"], web_advice["advice"]["lost"]["usd"]),
    }
    assert figures == dict.fromkeys(figures, (lost, usd)), figures
    assert "cache-read rate" in stats["lost_pricing"] == advised["lost"]["pricing"]

    # The simulator's break loses tokens too, but no figure prices them, and each says why.
    free = [c for c in calls if c["session"] == "free"]
    breaks = [c for c in free if c["cache_verdict"] == "client_break"]
    assert len(breaks) == 1, [(c["relation"], c["cache_verdict"], c["usage"], c["provider"]) for c in free]
    free_brk = breaks[0]
    free_detail = _cli(tmp_path, "show", free_brk["id"])
    assert isinstance(free_detail, dict)
    assert free_detail["cache"]["lost_tokens"] > 1500 and free_detail["cache"]["lost_cost_usd"] is None
    assert free_detail["cache"]["unpriced"] == SIMULATOR_FREE
    free_stats = _cli(tmp_path, "stats", "--session", "free")
    assert isinstance(free_stats, dict) and free_stats["lost_usd"] is None
    assert sessions["free"]["lost_usd"] is None and sessions["free"]["cost_usd"] is None
    assert sessions["free"]["cost_unpriced"] == SIMULATOR_FREE
    assert web_sessions["free"]["cost_usd"] is None and web_sessions["free"]["cost_unpriced"] == SIMULATOR_FREE
    assert web_session["free"]["summary"]["lost_usd"] is None
    free_found = _cli(tmp_path, "findings", "free")
    assert isinstance(free_found, dict)
    assert all(f["usd"] in (None, 0.0) for f in free_found["findings"]), free_found["findings"]
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
