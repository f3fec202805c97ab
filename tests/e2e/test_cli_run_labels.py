"""The INSTALLED `ctxscope run` labels everything it launches: a script that ignores the base-URL
variables and reaches https://api.openai.com through HTTPS_PROXY alone lands under the run's label;
`run --sim` points a script at the simulator with a dummy key; a command that makes no call gets no
session address. And curl, as a hostile or a plain client of the daemon's forward proxy, gets its
label from the proxy URL's user part, or a 400 for a Basic value that is not one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db

from support.serve_process import CTXSCOPE, free_port, running_serve

# The openai SDK pinned to the real host, as Codex and pi are: only HTTPS_PROXY can bring it to ctxscope.
PINNED = textwrap.dedent("""
    import openai
    with openai.OpenAI(api_key="sk-pinned-0123456789abcdef", base_url="https://api.openai.com/v1",
                       max_retries=0) as sdk:
        answer = sdk.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "pinned"}])
    print("answer:", answer.choices[0].message.content)
""")
# Uses the base URLs and whatever key the environment has.
FROM_ENV = textwrap.dedent("""
    import os, anthropic, openai
    print("keys:", os.environ["OPENAI_API_KEY"], os.environ["ANTHROPIC_API_KEY"])
    with openai.OpenAI(max_retries=0) as o:
        o.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "to the sim"}])
    with anthropic.Anthropic(max_retries=0) as a:
        a.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
""")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _calls(db: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 20
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = open_db(db)
            try:
                rows = list_calls(conn, limit=1000, newest_first=False)
            finally:
                conn.conn.close()
            if len(rows) >= n:
                return rows
        time.sleep(0.05)
    raise AssertionError(f"expected {n} calls, found {len(rows)}")


@pytest.fixture
def launch(tmp_path, sim_alone):
    """`ctxscope run` by the installed command, its daemon's openai upstream the simulator thread;
    the daemon it starts is stopped after the test."""
    port, db = free_port(), tmp_path / "captures.db"
    env = {**os.environ, "CTXSCOPE_HOME": str(tmp_path / "home")}
    for name in (
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "GOOGLE_GEMINI_BASE_URL",
        "CTXSCOPE_DB",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "HTTPS_PROXY",
        "https_proxy",
    ):
        env.pop(name, None)
    pids: list[int] = []

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [
            str(CTXSCOPE),
            "run",
            "--port",
            str(port),
            "--db",
            str(db),
            "--upstream",
            f"openai={sim_alone.base_url}",
            *args,
        ]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        pids.extend(int(p) for p in re.findall(r"\(pid (\d+),", done.stderr))
        return done

    run.db = db
    run.port = port
    yield run
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), f"the daemon {pid} did not stop"


def test_a_script_that_reaches_the_real_host_through_the_proxy_lands_under_the_label(launch, tmp_path, sim_alone):
    (tmp_path / "pinned.py").write_text(PINNED)
    sim_alone.state.set_script([{"text": "Answered through the tunnel."}])
    done = launch("--label", "pinned run é", "--", sys.executable, "pinned.py")
    assert done.returncode == 0, done.stderr
    assert "answer: Answered through the tunnel." in done.stdout
    [row] = _calls(launch.db, 1)
    assert (row["session"], row["provider"], row["api"], row["outcome"]) == (
        "pinned run é",
        "openai",
        "openai.chat",
        "ok",
    )
    assert f"session 'pinned run é': http://127.0.0.1:{launch.port}/#/session/pinned%20run%20%C3%A9" in done.stderr


def test_a_command_that_makes_no_call_gets_no_session_address(launch):
    done = launch("--label", "quiet", "--", sys.executable, "-c", "print('no calls')")
    assert done.returncode == 0, done.stderr
    assert "no calls were recorded under 'quiet'" in done.stderr
    assert "#/session/" not in done.stderr


def test_run_sim_points_the_command_at_the_simulator_with_dummy_keys(launch, tmp_path):
    (tmp_path / "from_env.py").write_text(FROM_ENV)
    done = launch("--sim", "--label", "sim run", "--", sys.executable, "from_env.py")
    assert done.returncode == 0, done.stderr
    assert "keys: sk-ctxscope-sim sk-ant-ctxscope-sim" in done.stdout
    rows = _calls(launch.db, 2)
    assert [(r["session"], r["provider"], r["api"], r["outcome"]) for r in rows] == [
        ("sim run", "u/sim", "openai.chat", "ok"),
        ("sim run", "u/sim", "anthropic.messages", "ok"),
    ]
    assert "#/session/sim%20run" in done.stderr


def _curl(port: int, ca: Path, user: str | None, *extra: str) -> subprocess.CompletedProcess:
    proxy = f"http://{user}@127.0.0.1:{port}" if user is not None else f"http://127.0.0.1:{port}"
    return subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "20",
            "--proxy",
            proxy,
            "--cacert",
            str(ca),
            *extra,
            "https://api.openai.com/v1/chat/completions",
            "-H",
            "content-type: application/json",
            "-H",
            "authorization: Bearer sk-curl-0123456789abcdef",
            "-d",
            '{"model":"gpt-5","messages":[{"role":"user","content":"curl"}]}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
    )


def test_curl_through_the_forward_proxy_carries_the_proxy_users_label(tmp_path, sim_alone):
    with running_serve(tmp_path, "--upstream", f"openai={sim_alone.base_url}") as (_proc, base):
        port = int(base.rsplit(":", 1)[1])
        ca = tmp_path / "home" / "ca" / "ca.pem"
        assert _curl(port, ca, "curl%20job").returncode == 0  # a user without a password: Basic base64("curl job:")
        assert _curl(port, ca, "dots:pw", "--proxy-basic").returncode == 0
        assert _curl(port, ca, None).returncode == 0  # no user: no label, a session of its own
        rows = _calls(tmp_path / "c.db", 3)
        assert rows[0]["session"] == "curl job" and rows[1]["session"] == "dots"
        assert rows[2]["session"] not in ("curl job", "dots")
        assert all(r["outcome"] == "ok" for r in rows)
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log


@pytest.mark.parametrize("value", ["Basic !!!not-base64", "Basic " + "QUFB" * 100, "Basic SGVsbG8KV29ybGQ6"])
def test_a_hostile_proxy_authorization_is_refused_in_one_line(tmp_path, sim_alone, value):
    import socket

    with running_serve(tmp_path, "--upstream", f"openai={sim_alone.base_url}") as (_proc, base):
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(
                f"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n"
                f"Proxy-Authorization: {value}\r\n\r\n".encode()
            )
            answer = b""
            while chunk := client.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 "), answer
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log and "Proxy-Authorization" in log
