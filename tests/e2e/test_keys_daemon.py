"""Keys go only where the user chose, attacked the way the probe did against the INSTALLED
`ctxscope serve` and `ctxscope run`: a replay whose Host names a listener, a launcher facing an
impostor on its port, and commands that create the home. Every trap is a real listener on a
loopback address that records what it receives; no key may arrive in one."""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db

from support import sdk_clients
from support.key_traps import Seen, Trap
from support.serve_process import CTXSCOPE, free_port, running_serve

DAEMON_KEY = "sk-ant-api03-DAEMONKEY-" + secrets.token_hex(16)  # the daemon's $ANTHROPIC_API_KEY
CLIENT_KEY = "sk-ant-api03-CLIENTKEY-" + secrets.token_hex(16)


def _request(
    base: str, method: str, path: str, host: str, headers: dict | None = None, body: bytes | None = None
) -> tuple[int, bytes]:
    """One request to the daemon with a Host header of the attacker's choosing."""
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _stored(db: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 30
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = open_db(db)
            try:
                rows = list_calls(conn, limit=100, newest_first=False)
            finally:
                conn.conn.close()
            if len(rows) >= n:
                return rows
        time.sleep(0.1)
    raise AssertionError(f"expected {n} stored calls, found {len(rows)}")


def _one_call(base: str, db: Path) -> dict:
    client = sdk_clients.Anthropic(api_key=CLIENT_KEY, base_url=base + "/u/sim", max_retries=0)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    [row] = _stored(db, 1)
    return row


def test_the_ui_replay_and_curl_go_to_the_daemon_whatever_host_the_request_names(tmp_path):
    with Trap("127.0.0.2") as trap, running_serve(tmp_path, env={"ANTHROPIC_API_KEY": DAEMON_KEY}) as (_, base):
        row = _one_call(base, tmp_path / "c.db")
        status, page = _request(base, "GET", "/", host=trap.netloc)
        token = re.search(rb'name="ctxscope-token" content="([0-9a-f]+)"', page).group(1).decode()
        post = {"X-Ctxscope-Token": token, "Content-Type": "application/json"}
        for host in (trap.netloc, "203.0.113.7"):  # a listener of the attacker's, a host out on the net
            status, body = _request(base, "POST", f"/_ctxscope/api/replay?id={row['id']}", host, post, b"{}")
            assert status == 200, body
            answer = json.loads(body)
            assert answer["replay"]["replay_of"] == row["id"] and answer["replay"]["status"] == 200
        status, body = _request(base, "GET", f"/_ctxscope/api/curl?id={row['id']}&via=daemon", host=trap.netloc)
        assert status == 200, body
        command = json.loads(body)["command"]
        assert f"POST {base}/u/sim/v1/messages" in command and "127.0.0.2" not in command
    assert trap.connections == 0 and trap.seen == []
    assert DAEMON_KEY.encode() not in (tmp_path / "c.db").read_bytes()


# -- the launcher --------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, sys, urllib.request
    open(sys.argv[1], "w").close()  # the command ran
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", method="POST",
                                 data=b'{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}',
                                 headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                          "anthropic-version": "2023-06-01", "content-type": "application/json"})
    print(urllib.request.urlopen(req, timeout=30).status)
""")


def _launch(tmp_path: Path, home: Path, port: int, *command: str) -> subprocess.CompletedProcess:
    """The INSTALLED `ctxscope run --port PORT -- python CHILD MARKER`, with its own home."""
    (tmp_path / "child.py").write_text(CHILD)
    env = {**os.environ, "CTXSCOPE_HOME": str(home), "ANTHROPIC_API_KEY": CLIENT_KEY}
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "CTXSCOPE_DB"):
        env.pop(name, None)
    argv = [
        str(CTXSCOPE),
        "run",
        "--port",
        str(port),
        "--label",
        "proved",
        *command,
        "--",
        sys.executable,
        str(tmp_path / "child.py"),
        str(tmp_path / "ran"),
    ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def _refused(done: subprocess.CompletedProcess, tmp_path: Path, trap: Trap) -> None:
    assert done.returncode == 1, done.stderr
    assert "does not prove it is your ctxscope daemon" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "ran").exists(), "the command ran against an impostor"
    assert trap.keys_seen(CLIENT_KEY) == [] and all(s.method == "GET" for s in trap.seen)
    assert all(s.path.startswith("/_ctxscope/api/status?store=0&nonce=") for s in trap.seen)


@pytest.mark.parametrize(
    "answer", [{"writer": None}, {"writer": None, "identity": "0" * 64}], ids=["writer-null", "wrong-hmac"]
)
def test_the_launcher_refuses_an_impostor_before_the_command_runs(tmp_path, answer):
    with Trap(answer=lambda seen: (200, answer)) as trap:
        done = _launch(tmp_path, tmp_path / "home", trap.port)
    _refused(done, tmp_path, trap)
    assert trap.seen  # it was asked, and it failed the question


def test_the_launcher_uses_its_daemon_and_refuses_a_relay_to_it(tmp_path, sim_alone):
    home = tmp_path / "home"  # running_serve's home: the launcher shares it, as one user does
    with running_serve(tmp_path, "--upstream", f"anthropic={sim_alone.base_url}") as (_, base):
        port = int(base.rsplit(":", 1)[1])

        def relay(seen: Seen) -> tuple[int, object]:  # the real daemon's answer, passed on from another port
            status, body = _request(base, "GET", seen.path, host=f"127.0.0.1:{port}")
            return status, json.loads(body)

        with Trap(answer=relay) as trap:
            relayed = _launch(tmp_path, home, trap.port)
        _refused(relayed, tmp_path, trap)
        done = _launch(tmp_path, home, port)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "ran").exists() and done.stdout.strip() == "200"
        assert "already runs" not in done.stderr and "started the daemon" not in done.stderr
        [row] = _stored(tmp_path / "c.db", 1)
        assert (row["session"], row["api"]) == ("proved", "anthropic.messages")


# -- the home ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["ca", "path"], ["ca", "env"], ["run", "--port", "{port}", "--", "true"]], ids=["ca-path", "ca-env", "run"]
)
def test_every_home_creating_command_creates_it_owner_only(tmp_path, args):
    home = tmp_path / "fresh" / "home"
    env = {**os.environ, "CTXSCOPE_HOME": str(home)}
    port = free_port()  # nothing listens: `run` starts a daemon there, which is stopped below
    argv = [str(CTXSCOPE), *(a.replace("{port}", str(port)) for a in args)]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0o022)
    )
    pid = re.search(r"\(pid (\d+),", done.stderr)
    if pid:  # the daemon `run` started: stopped, and waited for
        os.kill(int(pid.group(1)), 15)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid.group(1)}").exists() and time.monotonic() < deadline:
            if Path(f"/proc/{pid.group(1)}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.05)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    secret = home / "daemon-secret"
    assert not secret.exists() or stat.S_IMODE(secret.stat().st_mode) == 0o600
