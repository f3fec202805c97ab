"""The CLI as a user meets it: help everywhere, documented commands, queries, serve's promises."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx2
import pytest
from click.testing import CliRunner

from ctxscope.main import LAZY_COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]


def _all_commands(group, prefix=()):
    """Every command, through click's own listing (the lazy ones load here)."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        path = prefix + (name,)
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, path)


def test_every_command_has_help_and_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    runner = CliRunner()
    for path, cmd in _all_commands(cli):
        assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, result.output
        assert f"ctxscope {' '.join(path)}" in readme, f"`ctxscope {' '.join(path)}` is not in the README"


def test_help_lists_each_lazy_command_with_the_first_sentence_of_its_own_help():
    """`ctxscope --help` lists the commands without loading them: what it says of each is its help."""
    ctx = click.Context(cli)
    assert set(cli.list_commands(ctx)) == {"serve", "sim", *LAZY_COMMANDS}
    listing = CliRunner().invoke(cli, ["--help"], terminal_width=200).output
    for name, (_, summary) in LAZY_COMMANDS.items():
        real = cli.get_command(ctx, name)
        assert real is not None and real.name == name
        for limit in (30, 45, 80, 400):
            assert click.Command(name, help=summary).get_short_help_str(limit) == real.get_short_help_str(limit), name
        assert f"{name} " in listing and real.get_short_help_str(194 - len(name))[:40] in listing, name


def test_serve_refuses_a_non_loopback_address(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "c.db")])
    assert result.exit_code != 0
    assert "--allow-remote" in result.output


def test_serve_rejects_a_bad_upstream(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--upstream", "nourl", "--db", str(tmp_path / "c.db")])
    assert result.exit_code != 0 and "NAME=URL" in result.output


@pytest.mark.slow
def test_query_commands_read_what_the_daemon_captured(proxy, sim):
    for i in range(3):
        with httpx2.Client() as c:
            c.post(
                proxy.url + "/s/cli-test/u/sim/v1/chat/completions",
                json={"model": "gpt-sim", "messages": [{"role": "user", "content": f"hello {i}"}]},
            )
    proxy.wait_for_calls(3)
    runner = CliRunner()
    db = ["--db", str(proxy.db_path)]
    calls = json.loads(runner.invoke(cli, ["calls", *db, "--json"]).output)
    assert len(calls) == 3 and {c["session"] for c in calls} == {"cli-test"}
    for key in (
        "id",
        "session",
        "seq",
        "started_at",
        "api",
        "model",
        "method",
        "path",
        "status",
        "outcome",
        "stream",
        "request_bytes",
        "response_bytes",
        "ttfb_ms",
        "duration_ms",
        "usage",
    ):
        assert key in calls[0], key
    assert set(calls[0]["usage"]) == {"input", "output", "cache_read", "cache_write"}
    table = runner.invoke(cli, ["calls", *db, "--wide"]).output
    assert "cli-test" in table and "gpt-sim" in table
    one = calls[-1]["id"]
    shown = json.loads(runner.invoke(cli, ["show", one[:12], *db, "--json"]).output)
    assert shown["id"] == one and shown["request"]["messages"][0]["content"] == "hello 0"
    raw = runner.invoke(cli, ["show", one, *db, "--request-raw"]).stdout_bytes
    assert json.loads(raw)["messages"][0]["content"] == "hello 0"
    sessions = json.loads(runner.invoke(cli, ["sessions", *db, "--json"]).output)
    assert sessions[0]["session"] == "cli-test" and sessions[0]["calls"] == 3
    status = json.loads(runner.invoke(cli, ["db", "status", *db, "--json"]).output)
    assert status["calls"] == 3
    missing = runner.invoke(cli, ["show", "ffffffff", *db])
    assert missing.exit_code == 2 and "no call matches" in missing.output


def test_queries_on_a_missing_database_fail_clearly(tmp_path):
    result = CliRunner().invoke(cli, ["calls", "--db", str(tmp_path / "nope.db")])
    assert result.exit_code != 0 and "no capture database" in result.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_serve(tmp_path, *, own_group: bool = False):
    port = _free_port()
    env = dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home"))
    db = tmp_path / "c.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxscope.main", "serve", "--port", str(port), "--db", str(db)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=own_group,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx2.get(url + "/_ctxscope/api/status?store=0", timeout=1)  # answered, never recorded
            return proc, url, db
        except httpx2.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise AssertionError("daemon did not start: " + (proc.stdout.read() or "")) from None
            time.sleep(0.1)


def _chat(url, n):
    with httpx2.Client(timeout=60) as c:  # the first call starts the simulator's child
        for i in range(n):
            r = c.post(
                url + "/u/sim/v1/chat/completions",
                json={"model": "gpt-sim", "messages": [{"role": "user", "content": f"m{i}"}]},
            )
            assert r.status_code == 200


def _count(db) -> int:
    result = CliRunner().invoke(cli, ["calls", "--db", str(db), "--json", "--limit", "100000"])
    return len(json.loads(result.output))


def _stop_serve(proc) -> str:
    """SIGTERM, as a service manager stops it; its output once it exited cleanly."""
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    return out


@pytest.mark.slow
def test_serve_drains_captures_on_sigterm(tmp_path):
    proc, url, db = _start_serve(tmp_path)
    _chat(url, 40)
    out = _stop_serve(proc)
    assert "listening on" in out and "sk-" not in out
    assert "stopping: finishing open calls" in out
    assert _count(db) == 40


@pytest.mark.slow
def test_a_closed_terminal_stops_serve_cleanly_and_loses_nothing(tmp_path):
    proc, url, db = _start_serve(tmp_path, own_group=True)
    try:
        _chat(url, 40)
        os.killpg(proc.pid, signal.SIGHUP)  # what the terminal's process group gets when it closes
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert _count(db) == 40


@pytest.mark.slow
def test_serve_killed_keeps_calls_completed_a_second_earlier(tmp_path):
    proc, url, db = _start_serve(tmp_path)
    try:
        _chat(url, 30)
        time.sleep(1.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    deadline = time.monotonic() + 15
    while _count(db) < 30 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _count(db) == 30
    db_handle = __import__("sqlite3").connect(db)
    assert db_handle.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_serve_and_its_writer_killed_together_keep_calls_completed_a_second_earlier(tmp_path):
    """Calls keep coming, never 50 ms apart, so the proxy hands them over without a pause and the
    writer child only spools them; SIGKILL to the daemon and the child at once must still lose
    only the last second: the next serve on the database stores what the spool holds.
    (At ~100 calls/s: a busy agent fleet.)"""
    proc, url, db = _start_serve(tmp_path, own_group=True)
    completed: list[float] = []
    try:
        _chat(url, 1)  # the simulator's child is up before the clock starts
        with httpx2.Client() as c:
            began = time.monotonic()
            while time.monotonic() - began < 2.5:
                r = c.post(
                    url + "/u/sim/v1/chat/completions",
                    json={"model": "gpt-sim", "messages": [{"role": "user", "content": f"m{len(completed)}"}]},
                )
                assert r.status_code == 200
                completed.append(time.monotonic())
                time.sleep(0.01)
        killed_at = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
    early = sum(1 for t in completed if t < killed_at - 1.0)
    assert early > 20  # the check below has something to check
    assert list(tmp_path.glob("c.db.spool-*")), "the killed writer left its spool behind"
    before = _count(db)
    proc, url, db = _start_serve(tmp_path)  # the next daemon on the same database
    recovered = re.search(r"(\d+) calls recovered", _stop_serve(proc))
    assert recovered and int(recovered.group(1)) >= 1, "the next writer recovered nothing from the spool"
    conn = __import__("sqlite3").connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    ids = [r[0] for r in conn.execute("SELECT id FROM calls")]
    conn.close()
    assert len(ids) == len(set(ids))  # nothing stored twice
    # The first call, the early calls and perhaps some later ones; the writer stores in order. On a
    # loaded machine a stretched sleep is a pause in which the writer stores (docs/architecture.md,
    # "The writer's supervisor"), so `before` may already hold the early calls: no loss either way.
    assert len(ids) >= early + 1, (len(ids), early, before, len(completed))
    assert not list(tmp_path.glob("c.db.spool-*"))
