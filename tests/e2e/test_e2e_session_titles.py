"""Session titles through the installed command: a real daemon stores them as the real SDK's calls
are stored, and `sessions`, `calls --session` and `show` print them with every body gone; a store
from before the titles is named once by the first command that opens it (docs/architecture.md,
"Totals per session")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import sdk_clients
from support.old_stores import before_migration, strip_bodies
from support.serve_process import CTXSCOPE, running_serve
from support.stored_calls import wait_for_stored

pytestmark = pytest.mark.e2e


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CTXSCOPE_DAEMON", "NO_COLOR")}
    env.update(CTXSCOPE_HOME=str(tmp_path / "home"), COLUMNS="160")
    done = subprocess.run(
        [str(CTXSCOPE), *args, "--db", str(tmp_path / "c.db")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


def test_the_daemon_stores_titles_that_the_cli_prints_without_a_body(tmp_path):
    with running_serve(tmp_path) as (_proc, base):
        client = sdk_clients.Anthropic(base_url=f"{base}/u/sim", api_key="sk-ant-test-not-a-key", max_retries=0)
        messages = [
            {"role": "user", "content": "<system-reminder>today</system-reminder>Rename the\x1b[2J widget\nplease"}
        ]
        for turn in range(2):
            answer = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=messages)
            messages += [
                {"role": "assistant", "content": answer.content[0].text or "ok"},
                {"role": "user", "content": f"and again {turn}"},
            ]
        rows = wait_for_stored(tmp_path / "c.db", 2)
    session = rows[0]["session"]
    assert rows[1]["session"] == session and not session.startswith("Rename")  # unnamed: its title is its prompt
    strip_bodies(tmp_path / "c.db")

    listed = json.loads(_cli(tmp_path, "sessions", "--json").stdout)
    assert [(s["session"], s["title"]) for s in listed] == [(session, "Rename the?[2J widget")]
    table = _cli(tmp_path, "sessions").stdout
    assert "Rename the?[2J widget" in table and "\x1b" not in table
    calls = _cli(tmp_path, "calls", "--session", session[:12]).stdout
    assert calls.splitlines()[0] == f'session {session}  "Rename the?[2J widget"'
    shown = _cli(tmp_path, "show", rows[1]["id"]).stdout
    assert f'#2 of session {session}  "Rename the?[2J widget"' in shown.splitlines()[0]


def test_a_store_from_before_the_titles_is_named_by_the_first_command(tmp_path):
    with running_serve(tmp_path) as (_proc, base):
        client = sdk_clients.Anthropic(base_url=f"{base}/u/sim", api_key="sk-ant-test-not-a-key", max_retries=0)
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "Measure the cold list"}]
        )
        (row,) = wait_for_stored(tmp_path / "c.db", 1)
    before_migration(tmp_path / "c.db", "m021_create_session_titles", "DROP TABLE session_titles")

    listed = json.loads(_cli(tmp_path, "sessions", "--json").stdout)  # migrates, then names it once
    assert [(s["session"], s["title"]) for s in listed] == [(row["session"], "Measure the cold list")]
    strip_bodies(tmp_path / "c.db")
    listed = json.loads(_cli(tmp_path, "sessions", "--json").stdout)
    assert [s["title"] for s in listed] == ["Measure the cold list"]
