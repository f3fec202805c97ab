"""What is a call, and the simulator's own address, against the INSTALLED `ctxscope serve`: a
simulator call is named by the daemon's /u/sim route everywhere it is handed on (curl, HAR, show,
replay), scripting the simulator records nothing, the sessions the project makes itself and the
non-model requests of known clients stay out of the default session list."""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import subprocess
import time
from pathlib import Path

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.simulator.control.client import SimulatorControl, SimulatorControlError

from support import sdk_clients
from support.serve_process import CTXSCOPE, running_serve

SIM_TOKEN = "simcalls-" + secrets.token_hex(8)
CLIENT_KEY = "sk-ant-api03-SIMCALLS-" + secrets.token_hex(16)


def _env() -> dict[str, str]:
    """The environment of a user who has no provider key at all."""
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def _cli(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [str(CTXSCOPE), *args, "--db", str(tmp_path / "c.db")],
        capture_output=True,
        text=True,
        env=dict(_env(), CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def _calls(db: Path) -> list[dict]:
    conn = open_db(db)
    try:
        rows = list_calls(conn, limit=1000, newest_first=False)
        more = {r[0]: r[1:] for r in conn.execute("SELECT id, upstream, grouped_by FROM calls").fetchall()}
    finally:
        conn.conn.close()
    return [dict(r, upstream=more[r["id"]][0], grouped_by=more[r["id"]][1]) for r in rows]


def _stored(db: Path, n: int) -> list[dict]:
    """The stored calls once there are ``n`` (the writer stores them in the order they ended)."""
    deadline = time.monotonic() + 30
    rows: list[dict] = []
    while time.monotonic() < deadline:
        rows = _calls(db) if db.exists() else []
        if len(rows) >= n:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"expected {n} stored calls, found {len(rows)}")


def _request(
    base: str, method: str, path: str, headers: dict | None = None, body: bytes | None = None
) -> tuple[int, bytes]:
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _model_call(base: str, text: str = "hi", label: str | None = None) -> None:
    prefix = f"/s/{label}" if label else ""
    client = sdk_clients.Anthropic(api_key=CLIENT_KEY, base_url=base + prefix + "/u/sim", max_retries=0)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=[{"role": "user", "content": text}])


def test_a_simulator_call_is_named_by_the_daemons_route_and_its_curl_runs_without_a_key(tmp_path):
    db = tmp_path / "c.db"
    with running_serve(tmp_path, env={"CTXSCOPE_SIM_TOKEN": SIM_TOKEN}) as (_, base):
        control = SimulatorControl(base + "/u/sim", SIM_TOKEN)
        control.reset()
        control.set_script([{"text": "scripted"}])
        control.config(context_window=200_000)
        assert control.pending() == [{"text": "scripted"}]
        control.requests()
        try:  # refused by the simulator: no token
            SimulatorControl(base + "/u/sim", "not-the-token").reset()
            raise AssertionError("a control request without the token was answered")
        except SimulatorControlError as exc:
            assert exc.status in (401, 403)
        _model_call(base)
        [row] = _stored(db, 1)  # the model call ended after every control request: they would be stored before it
        assert row["provider"] == "u/sim" and row["path"] == "/v1/messages"
        assert not any(str(c["path"]).startswith("/_sim") for c in _calls(db))

        shown = json.loads(_cli(tmp_path, "show", row["id"], "--json"))
        assert shown["upstream"] == "sim"  # the route's name: the child's port was never an address

        command = _cli(tmp_path, "curl", row["id"], "--daemon", base)
        assert f"curl -sS -X POST {base}/u/sim/v1/messages" in command
        assert "API_KEY" not in command  # the simulator takes no key: none is asked for
        ports = set(re.findall(r"127\.0\.0\.1:(\d+)", command))
        assert ports == {base.rsplit(":", 1)[1]}, command
        control.set_script([{"text": "again"}])
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, env=_env(), cwd=tmp_path, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["content"][0]["text"] == "again"
        again = _stored(db, 2)[1]
        assert again["provider"] == "u/sim" and again["status"] == 200 and again["upstream"] == "sim"

        har = tmp_path / "s.har"
        _cli(tmp_path, "export", row["session"], "-o", str(har), "--daemon", base)
        entries = json.loads(har.read_text())["log"]["entries"]
        assert [e["request"]["url"] for e in entries] == [f"{base}/u/sim/v1/messages"] * len(entries)

        status, body = _request(base, "GET", f"/_ctxscope/api/curl?id={row['id']}")  # the UI's copy as cURL
        assert status == 200 and f"POST {base}/u/sim/v1/messages" in json.loads(body)["command"]

        replayed = json.loads(_cli(tmp_path, "replay", row["id"], "--daemon", base, "--json"))  # no key anywhere
        assert replayed["replay"]["status"] == 200 and replayed["replay"]["replay_of"] == row["id"]

        page = _request(base, "GET", "/")[1]
        token = re.search(rb'name="ctxscope-token" content="([0-9a-f]+)"', page).group(1).decode()
        status, body = _request(
            base,
            "POST",
            f"/_ctxscope/api/replay?id={row['id']}",
            {"X-Ctxscope-Token": token, "Content-Type": "application/json"},
            b"{}",
        )
        assert status == 200, body
        assert json.loads(body)["replay"]["status"] == 200
        assert len(_stored(db, 4)) == 4


def test_the_sessions_ctxscope_makes_and_non_model_requests_stay_out_of_the_session_list(tmp_path):
    db = tmp_path / "c.db"
    with running_serve(tmp_path) as (_, base):
        # What Claude Code sends beside its model calls, to its provider route.
        for method, path in (
            ("POST", "/u/sim/api/claude_code/metrics"),
            ("GET", "/u/sim/api/claude_code/settings"),
            ("POST", "/u/sim/api/event_logging/batch"),
            ("HEAD", "/u/sim/"),
        ):
            _request(
                base,
                method,
                path,
                {
                    "x-api-key": CLIENT_KEY,
                    "content-type": "application/json",
                    "user-agent": "claude-cli/2.0 (external, cli)",
                },
                b"{}" if method == "POST" else None,
            )
        _model_call(base, "work", label="work")
        rows = _stored(db, 5)
        work = next(r for r in rows if r["session"] == "work")
        _cli(tmp_path, "replay", work["id"], "--daemon", base)
        _stored(db, 6)
    listed = json.loads(_cli(tmp_path, "sessions", "--json"))
    assert [s["session"] for s in listed] == ["work"]
    everything = {s["session"]: s["purpose"] for s in json.loads(_cli(tmp_path, "sessions", "--all", "--json"))}
    assert everything == {"work": None, "non-model": "non-model", f"replay:{work['id']}": "replay"}
    non_model = [r for r in _calls(db) if r["session"] == "non-model"]
    assert len(non_model) == 4 and {r["grouped_by"] for r in non_model} == {"non_model"}
    stats = json.loads(_cli(tmp_path, "stats", "--json"))
    assert stats["calls"] == 2 and stats["sessions"] == 2  # the work and its replay: no telemetry, no probe
    table = _cli(tmp_path, "sessions", "--all")
    assert "PURPOSE" in table.splitlines()[0] and "non-model" in table


def test_the_ui_replay_of_a_provider_call_without_a_key_names_no_command_line_option(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    db = tmp_path / "c.db"
    with running_serve(tmp_path, "--upstream", "anthropic=http://127.0.0.1:9") as (_, base):  # nobody there
        status, _ = _request(
            base,
            "POST",
            "/anthropic/v1/messages",
            {"x-api-key": CLIENT_KEY, "content-type": "application/json", "anthropic-version": "2023-06-01"},
            b'{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}',
        )
        assert status == 502
        [row] = _stored(db, 1)
        page = _request(base, "GET", "/")[1]
        token = re.search(rb'name="ctxscope-token" content="([0-9a-f]+)"', page).group(1).decode()
        status, body = _request(
            base,
            "POST",
            f"/_ctxscope/api/replay?id={row['id']}",
            {"X-Ctxscope-Token": token, "Content-Type": "application/json"},
            b"{}",
        )
        assert status == 400
        message = body.decode()
        assert "$ANTHROPIC_API_KEY" in message and "daemon" in message and "--" not in message, message
        done = subprocess.run(
            [str(CTXSCOPE), "replay", row["id"], "--db", str(db), "--daemon", base],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
            check=False,
        )
        assert done.returncode != 0 and "--api-key-env" in done.stderr  # the CLI's own option, on the CLI
