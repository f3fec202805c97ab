"""`advise --verify`: the advice replayed through the simulator of a running `ctxscope serve`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ctxscope.main import cli

from support.factories import T0, analysed, claude_code_like_session, make_exchange
from support.inspector_bodies import claude_code_turns, default_system, long_text

TOKEN = "advisor-verify-token-0123456789abcdef"


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    env = dict(os.environ, CTXSCOPE_HOME=str(tmp / "home"), CTXSCOPE_SIM_TOKEN=TOKEN)
    with open(tmp / "serve.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxscope.main", "serve", "--port", "0", "--db", str(tmp / "serve.db")],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            text=True,
        )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        found = re.search(r"listening on (http://\S+)", "".join(lines))
        assert found, "".join(lines)
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("gaps", [[20.0] * 7, [20.0, 400.0, 20.0, 700.0, 20.0, 20.0, 20.0]])
def test_the_simulator_confirms_the_advised_saving_within_5_points(tmp_path, daemon_url, gaps):
    analysed(tmp_path / "c.db", claude_code_like_session(8, gaps))
    result = CliRunner().invoke(
        cli,
        ["advise", "cc", "--db", str(tmp_path / "c.db"), "--verify", "--daemon", daemon_url, "--json"],
        env={"CTXSCOPE_SIM_TOKEN": TOKEN},
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    v = data["verify"]
    assert data["best"] != "as_sent" and v["best"] == data["best"]
    assert v["as_sent"]["cache_read"] == 0 and v["best_simulated"]["cache_read"] > 0  # the simulator read the cache
    assert v["simulated_saving_pct"] > 20 and v["error_pts"] <= 5, v

    text = CliRunner().invoke(
        cli,
        ["advise", "cc", "--db", str(tmp_path / "c.db"), "--verify", "--daemon", daemon_url],
        env={"CTXSCOPE_SIM_TOKEN": TOKEN},
    )
    assert text.exit_code == 0 and re.search(r"verified in the simulator \(\w+\): predicted saving", text.output)


def _stripped(value):
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items() if k != "cache_control"}
    return [_stripped(v) for v in value] if isinstance(value, list) else value


def test_a_claude_code_session_with_its_breakpoints_stripped(tmp_path, daemon_url):
    system = default_system(" " + long_text(2500))  # a Claude Code-sized system prompt
    bodies = [_stripped(b) for b in claude_code_turns(10, system=system, reminders=(3, 6))]
    assert "cache_control" not in json.dumps(bodies)
    analysed(
        tmp_path / "c.db",
        [make_exchange(request=b, started_at=T0 + 15 * i, session_label="cc") for i, b in enumerate(bodies)],
    )
    result = CliRunner().invoke(
        cli,
        ["advise", "cc", "--db", str(tmp_path / "c.db"), "--verify", "--daemon", daemon_url, "--json"],
        env={"CTXSCOPE_SIM_TOKEN": TOKEN},
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    v = data["verify"]
    assert data["advice"].startswith("add breakpoints at")
    assert v["best_simulated"]["cache_read"] > 0 and v["simulated_saving_pct"] > 0 and v["error_pts"] <= 5, v


def test_verify_without_a_daemon_says_so(tmp_path):
    analysed(tmp_path / "c.db", claude_code_like_session(3, []))
    result = CliRunner().invoke(
        cli,
        ["advise", "cc", "--db", str(tmp_path / "c.db"), "--verify", "--daemon", "http://127.0.0.1:9"],
        env={"CTXSCOPE_SIM_TOKEN": TOKEN},
    )
    assert result.exit_code != 0 and "no ctxscope daemon answers at http://127.0.0.1:9" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "--daemon URL" in result.output


def test_verify_shows_its_progress_on_a_terminal_and_nothing_in_a_pipe(tmp_path, daemon_url):
    """The installed command, its stderr a terminal: "replaying call N/8" as each call is re-sent."""
    import pty
    from pathlib import Path

    analysed(tmp_path / "c.db", claude_code_like_session(8, [20.0] * 7))
    command = [str(Path(sys.executable).parent / "ctxscope"), "advise", "cc", "--db", str(tmp_path / "c.db")]
    command += ["--verify", "--daemon", daemon_url, "--json"]
    env = dict(os.environ, CTXSCOPE_SIM_TOKEN=TOKEN, CTXSCOPE_HOME=str(tmp_path / "home"))
    main, side = pty.openpty()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=side, env=env) as proc:
        os.close(side)
        shown = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the command exited: the terminal is gone
                break
            if not chunk:
                break
            shown += chunk
        out = proc.stdout.read() if proc.stdout else b""
    os.close(main)
    assert proc.returncode == 0, shown
    assert json.loads(out)["verify"]["top"] is not None
    steps = re.findall(rb"replaying call (\d+)/(\d+)", shown)
    assert (b"1", b"8") in steps and (b"8", b"8") in steps, shown

    piped = subprocess.run(command, capture_output=True, env=env, check=True)
    assert b"replaying call" not in piped.stderr
