"""`ctxscope run -- COMMAND`: a real daemon started on demand, a real script with the real SDKs,
its calls captured under the run's label, the exit code passed through."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db

SCRIPT = textwrap.dedent("""
    import os, sys
    import anthropic, openai
    with openai.OpenAI(api_key="sk-run-test-0123456789", max_retries=0) as o:
        o.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "from the script"}])
    with anthropic.Anthropic(api_key="sk-ant-run-test-0123456789", max_retries=0) as a:
        a.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    print("gemini at", os.environ["GOOGLE_GEMINI_BASE_URL"])
    sys.exit(int(sys.argv[1]))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def launcher(tmp_path, sim_alone):
    """Runs `ctxscope run` in a child process; stops the daemon it started after the test."""
    port, db = _free_port(), tmp_path / "captures.db"
    env = {**os.environ, "CTXSCOPE_HOME": str(tmp_path / "home")}
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "CTXSCOPE_DB"):
        env.pop(name, None)
    pids: list[int] = []

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [
            sys.executable,
            "-c",
            "from ctxscope.main import main; main()",
            "run",
            "--port",
            str(port),
            "--db",
            str(db),
            "--upstream",
            f"openai={sim_alone.base_url}",
            "--upstream",
            f"anthropic={sim_alone.base_url}",
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


def test_run_starts_the_daemon_captures_under_the_label_and_passes_the_exit_code(launcher, tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    first = launcher("--label", "job one", "--", sys.executable, "script.py", "3")
    assert first.returncode == 3, first.stderr
    assert "started the daemon" in first.stderr
    port = launcher.port
    assert f"gemini at http://127.0.0.1:{port}/s/job%20one/gemini" in first.stdout
    assert f"session 'job one': http://127.0.0.1:{port}/#/session/job%20one" in first.stderr
    rows = _calls(launcher.db, 2)
    assert [(r["session"], r["api"], r["outcome"]) for r in rows] == [
        ("job one", "openai.chat", "ok"),
        ("job one", "anthropic.messages", "ok"),
    ]

    # A second run finds the daemon running and uses it; without --label the command names the session.
    second = launcher("--", sys.executable, "script.py", "0")
    assert second.returncode == 0, second.stderr
    assert "started the daemon" not in second.stderr and "already runs" in second.stderr
    rows = _calls(launcher.db, 4)
    assert {r["session"] for r in rows[2:]} == {m.group(1) for m in [re.search(r"session '([^']+)'", second.stderr)]}
    assert rows[2]["session"].startswith(Path(sys.executable).name + "-")


def test_a_missing_command_is_127(launcher):
    done = launcher("--", "no-such-command-ctxscope-test")
    assert done.returncode == 127 and "command not found" in done.stderr
