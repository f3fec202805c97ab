"""The installed `ctxscope tail`, `status` and `stop` against a real daemon: one line per call as it
is stored, across a daemon restart; the daemon looked at and stopped by its home
(docs/architecture.md, "The command line", "One daemon per home")."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support import sdk_clients
from support.serve_process import CTXSCOPE, free_port, running_serve

pytestmark = pytest.mark.e2e


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CTXSCOPE_DAEMON", "NO_COLOR", "COLUMNS")}
    return dict(env, CTXSCOPE_HOME=str(tmp_path / "home"), **more)


class Lines:
    """A process's output lines as they come, each with the time it arrived."""

    def __init__(self, stream) -> None:
        self.q: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.q.put((time.monotonic(), line.rstrip("\n")))

    def next(self, timeout: float) -> tuple[float, str]:
        at, line = self.q.get(timeout=timeout)
        self.seen.append(line)
        return at, line

    def until(self, text: str, timeout: float) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, line = self.next(max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} in {timeout} s; saw {self.seen}") from None
            if text in line:
                return at, line


def _ask(base: str, text: str) -> float:
    """One Anthropic SDK call through the daemon's simulator; the time it returned."""
    client = sdk_clients.Anthropic(base_url=f"{base}/u/sim", api_key="sk-ant-test-not-a-key", max_retries=0)
    client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        system="You are a careful coding agent.",
        messages=[{"role": "user", "content": text}],
    )
    return time.monotonic()


@pytest.fixture
def tail_process(tmp_path):
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Lines, Lines]:
        proc = subprocess.Popen(
            [str(CTXSCOPE), "tail", *args],
            env=env or _env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc, Lines(proc.stdout), Lines(proc.stderr)

    yield start
    for proc in started:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def test_tail_prints_each_call_within_two_seconds_and_keeps_going_across_a_restart(tmp_path, tail_process):
    with running_serve(tmp_path) as (_, base):
        proc, out, err = tail_process()
        err.until("following", 15)
        first = "Make the flaky test in test_io.py pass\nIt fails one run in ten."
        sent = _ask(base, first)
        # The daemon's first call waits for the writer child's first analysis (its tokenizer loads:
        # 1.6 s on an idle machine); every later one is stored within the writer's pause (~0.3 s).
        at, line = out.until("Make the flaky test", 15.0)
        assert " epoch " in line and "claude-sonnet-4-5" in line and line.endswith(" 200"), line
        assert "main T1" in line and " off " in line, line  # thread; verdict: no cache requested
        assert "It fails" not in line  # the title is the first line only
        sent = _ask(base, first)  # the same prompt again: identical, and its verdict
        at, line = out.until(" identical ", 2.5)
        assert at - sent < 2.0, line
        assert " off " in line and "Make the flaky test" in line, line
        assert "\x1b[" not in line  # not a terminal: no colour
    err.until("lost the daemon", 15)
    with running_serve(tmp_path) as (_, base):  # the same home, another port: found again by its record
        err.until("regained the daemon", 15)
        _ask(base, "A second daemon, the same home")  # (the same key and client soon after: the same session)
        _, line = out.next(15.0)  # the new daemon's first call: its writer's first analysis again
        assert " epoch " in line and "Make the flaky test" in line, line
        sent = _ask(base, "A second daemon, the same home")
        at, line = out.next(2.5)
        assert at - sent < 2.0 and " identical " in line, line
    assert proc.poll() is None  # still following
    assert not [line for line in err.seen if "Traceback" in line]


def test_tail_filters_and_json_lines(tmp_path, tail_process):
    with running_serve(tmp_path) as (_, base):
        _, out, err = tail_process("--json", "--model", "gpt")
        _, errors_only, err2 = tail_process("--errors")
        err.until("following", 15)
        err2.until("following", 15)
        _ask(base, "Not a gpt model: filtered out")
        client = sdk_clients.OpenAI(base_url=f"{base}/u/sim/v1", api_key="sk-test-not-a-key", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Count to three"}])
        _, line = out.next(15)  # (the daemon's first call: its writer's first analysis)
        row = json.loads(line)
        assert row["model"] == "gpt-4o" and row["title"] == "Count to three" and row["relation"] == "EPOCH_START"
        assert row["status"] == 200 and isinstance(row["duration_ms"], (int, float))
        with pytest.raises(queue.Empty):  # the Anthropic call was not a gpt model, and nothing failed
            out.next(1.0)
        with pytest.raises(queue.Empty):
            errors_only.next(0.1)


def test_status_and_stop_find_the_daemon_by_its_home(tmp_path):
    env = _env(tmp_path)
    idle = subprocess.run([str(CTXSCOPE), "status"], env=env, capture_output=True, text=True, timeout=30)
    assert idle.returncode == 3 and "no ctxscope daemon is running" in idle.stdout, idle.stdout + idle.stderr
    log = tmp_path / "serve.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [str(CTXSCOPE), "serve", "--port", str(free_port()), "--db", str(tmp_path / "c.db")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "home" / "daemon.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        base = json.loads((tmp_path / "home" / "daemon.json").read_text())["url"]
        _ask(base, "Count this call")
        deadline = time.monotonic() + 15
        while True:  # (stored once the traffic pauses; the writer's counters follow the commit)
            status = subprocess.run(
                [str(CTXSCOPE), "status", "--json"], env=env, capture_output=True, text=True, timeout=30
            )
            assert status.returncode == 0, status.stdout + status.stderr
            report = json.loads(status.stdout)
            if (report["calls_stored"] and report["writer_backlog"] == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert report["pid"] == proc.pid and report["url"] == base and report["calls_stored"] == 1
        assert report["db"] == str(tmp_path / "c.db") and report["writer_backlog"] == 0, json.dumps(report)
        assert report["uptime_s"] is not None and 0 <= report["uptime_s"] < 120
        human = subprocess.run([str(CTXSCOPE), "status"], env=env, capture_output=True, text=True, timeout=30)
        assert human.returncode == 0 and f"pid: {proc.pid}" in human.stdout and "calls stored: 1" in human.stdout
        stopped = subprocess.run([str(CTXSCOPE), "stop"], env=env, capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert proc.wait(5) == 0, log.read_text()  # gone by the time stop returned, and cleanly
        after = subprocess.run([str(CTXSCOPE), "status"], env=env, capture_output=True, text=True, timeout=30)
        assert after.returncode == 3, after.stdout
        again = subprocess.run([str(CTXSCOPE), "stop"], env=env, capture_output=True, text=True, timeout=30)
        assert again.returncode == 0 and "no ctxscope daemon is running" in again.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_stop_does_not_signal_a_pid_the_home_lock_does_not_name(tmp_path):
    """A record planted (or left stale) in the home naming another process of ours: not signalled."""
    env = _env(tmp_path)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        with running_serve(tmp_path) as (proc, _):
            record = tmp_path / "home" / "daemon.json"
            data = json.loads(record.read_text())
            record.write_text(json.dumps(dict(data, pid=victim.pid)))
            stopped = subprocess.run([str(CTXSCOPE), "stop"], env=env, capture_output=True, text=True, timeout=60)
            assert stopped.returncode == 1 and "not signalling" in stopped.stderr, stopped.stdout + stopped.stderr
            assert "Traceback" not in stopped.stderr
            assert victim.poll() is None and proc.poll() is None
            record.write_text(json.dumps(data))  # (the daemon removes only its own record at its stop)
    finally:
        victim.kill()
        victim.wait(10)
