"""The installed `ctxscope serve`: one daemon per home, found by every command without an address
flag, and a shutdown that tells the truth (docs/architecture.md, "One daemon per home", "Honest
outcomes")."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import pytest

from support.factories import analysed, claude_code_like_session
from support.serve_process import CTXSCOPE, free_port, running_serve

pytestmark = pytest.mark.e2e


def _sim_token(home: Path) -> str:
    return (home / "sim-token").read_text().strip()


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CTXSCOPE_DAEMON", "CTXSCOPE_SIM_TOKEN")}
    return dict(env, CTXSCOPE_HOME=str(tmp_path / "home"), **more)


def test_a_second_serve_on_the_same_home_refuses_and_leaves_the_first_whole(tmp_path):
    with running_serve(tmp_path) as (proc, base):
        home = tmp_path / "home"
        token = _sim_token(home)
        recorded = json.loads((home / "daemon.json").read_text())
        assert recorded == {"pid": proc.pid, "url": base, "db": str(tmp_path / "c.db")}
        assert stat.S_IMODE((home / "daemon.json").stat().st_mode) == 0o600
        for db in (tmp_path / "c.db", tmp_path / "other.db"):  # same home; then same database, other home
            other_home = home if db.name == "other.db" else tmp_path / "home2"
            second = subprocess.run(
                [str(CTXSCOPE), "serve", "--port", str(free_port()), "--db", str(db)],
                env=dict(_env(tmp_path), CTXSCOPE_HOME=str(other_home)),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 1, second.stdout + second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and f"pid {proc.pid}, {base}" in lines[0], second.stderr
            assert "Traceback" not in second.stderr
        assert _sim_token(home) == token  # untouched: the first's simulator still takes its token
        assert not (tmp_path / "other.db").exists()
        r = httpx2.post(f"{base}/u/sim/_sim/script", headers={"x-sim-token": token}, json=[{"text": "hi"}], timeout=30)
        assert r.status_code == 200, r.text
    assert not (home / "daemon.json").exists()  # removed at a clean stop


def test_a_dead_daemons_lock_is_taken_over(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [str(CTXSCOPE), "serve", "--port", str(free_port()), "--db", str(tmp_path / "c.db")],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not (home / "daemon.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.kill()  # no clean stop: its files stay behind
    proc.wait(10)
    assert (home / "daemon.json").exists()
    with running_serve(tmp_path) as (new, _base):
        assert json.loads((home / "daemon.json").read_text())["pid"] == new.pid


def _model_call(db: Path) -> str | None:
    if not db.exists():
        return None
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT id FROM calls WHERE path LIKE '%chat/completions'").fetchone()
    return row[0] if row else None


def test_commands_find_a_daemon_on_another_port_without_an_address_flag(tmp_path):
    env = _env(tmp_path, OPENAI_API_KEY="sim-key")  # (the agent's key for the simulator, for the replay)
    with running_serve(tmp_path) as (_, base):
        assert not base.endswith(":8787")
        agent = subprocess.run(
            [str(CTXSCOPE), "agent", "run", "say hi", "--provider", "sim", "--workspace", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert agent.returncode == 0, agent.stdout + agent.stderr
        deadline = time.monotonic() + 30
        while not (call := _model_call(tmp_path / "c.db")):
            assert time.monotonic() < deadline, "the agent's call was not stored"
            time.sleep(0.2)
        replay = subprocess.run(
            [str(CTXSCOPE), "replay", call, "--db", str(tmp_path / "c.db")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert "replayed" in replay.stdout
        analysed(tmp_path / "adv.db", claude_code_like_session(3, []))
        advise = subprocess.run(
            [str(CTXSCOPE), "advise", "cc", "--db", str(tmp_path / "adv.db"), "--verify"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert advise.returncode == 0 and "verified in the simulator" in advise.stdout, advise.stdout + advise.stderr
        ca_env = subprocess.run([str(CTXSCOPE), "ca", "env"], env=env, capture_output=True, text=True, timeout=60)
        assert f"export HTTPS_PROXY={base}" in ca_env.stdout.splitlines()
    gone = subprocess.run(
        [str(CTXSCOPE), "replay", call, "--db", str(tmp_path / "c.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 1 and "Traceback" not in gone.stderr and "urlopen" not in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1 and "http://127.0.0.1:8787" in gone.stderr
    assert "--daemon" in gone.stderr


def test_every_command_that_talks_to_the_daemon_names_the_same_option(tmp_path):
    for command in (
        ["agent", "run"],
        ["agent", "chat"],
        ["replay"],
        ["advise"],
        ["ca", "env"],
        ["run"],
        ["curl"],
        ["export"],
    ):
        out = subprocess.run(
            [str(CTXSCOPE), *command, "--help"], env=_env(tmp_path), capture_output=True, text=True, timeout=60
        ).stdout
        assert "--daemon URL" in out and "CTXSCOPE_DAEMON" in out, (command, out)
        assert "--proxy" not in out and "--url" not in out, (command, out)


def _slow_stream(base: str, home: Path, got: list[str]) -> threading.Thread:
    token = _sim_token(home)
    r = httpx2.post(
        f"{base}/u/sim/_sim/script",
        headers={"x-sim-token": token},
        timeout=30,
        json=[{"text": "one two three four five six seven eight", "chunk_delay_ms": 250}],
    )
    assert r.status_code == 200, r.text

    def read() -> None:
        with httpx2.stream(
            "POST",
            f"{base}/u/sim/v1/chat/completions",
            timeout=60,
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]},
        ) as resp:
            got.extend(resp.iter_lines())

    thread = threading.Thread(target=read)
    thread.start()
    return thread


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_during_a_slow_stream_stores_it_ok_and_prints_no_traceback(tmp_path, sig):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:  # its own process group, as a terminal's Ctrl-C reaches all of it
        proc = subprocess.Popen(
            [str(CTXSCOPE), "serve", "--port", str(port), "--db", str(tmp_path / "c.db")],
            env=_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "home" / "daemon.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        got: list[str] = []
        reader = _slow_stream(base, tmp_path / "home", got)
        time.sleep(0.8)  # mid-stream
        os.killpg(proc.pid, sig)
        reader.join(60)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any("[DONE]" in line for line in got)
    text = log.read_text()
    assert "Traceback" not in text and "Fatal Python error" not in text and "Unhandled exception" not in text, text
    with sqlite3.connect(tmp_path / "c.db") as db:
        rows = db.execute("SELECT outcome FROM calls WHERE path LIKE '%chat/completions'").fetchall()
    assert rows == [("ok",)]
    assert not (tmp_path / "home" / "daemon.json").exists()


def test_timeout_8_serve_prints_no_fatal_error(tmp_path):
    result = subprocess.run(
        ["timeout", "8", str(CTXSCOPE), "serve", "--port", str(free_port()), "--db", str(tmp_path / "c.db")],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 124  # ended by timeout's SIGTERM, then exited on its own
    output = result.stdout + result.stderr
    assert "listening on" in output and "Fatal Python error" not in output and "Traceback" not in output, output
