"""`agent run` and `agent chat` (the click group the root CLI mounts) against a simulator on loopback."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from click.testing import CliRunner

from ctxscope.agent_commands import agent_group
from ctxscope.simulator.app import STATE_KEY, start_simulator


@pytest.fixture
def sim():
    """A simulator on its own loop in a thread: the CLI runs its own asyncio.run in the test thread."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box = {}

    def serve():
        asyncio.set_event_loop(loop)
        box["runner"], box["url"] = loop.run_until_complete(start_simulator(port=0))
        ready.set()
        loop.run_forever()
        loop.run_until_complete(box["runner"].cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box["runner"].app[STATE_KEY], box["url"]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    if not thread.is_alive():
        loop.close()


def invoke(args, home, input=None, env=None):
    return CliRunner().invoke(
        agent_group, args, input=input, env={"CTXSCOPE_HOME": str(home), **(env or {})}, catch_exceptions=False
    )


def sim_args(url, ws):
    return ["--provider", "sim", "--direct", "--base-url", url + "/v1", "--workspace", str(ws)]


def test_run_executes_a_task_and_streams_activity(tmp_path, sim):
    state, url = sim
    ws = tmp_path / "ws"
    ws.mkdir()
    state.set_script(
        [
            {
                "text": "Writing it.",
                "tool_calls": [{"name": "write", "arguments": {"path": "hello.txt", "content": "hi\n"}}],
            },
            {"text": "Done: hello.txt created."},
        ]
    )
    result = invoke(["run", "create hello.txt", *sim_args(url, ws)], tmp_path / "home")
    assert result.exit_code == 0, result.stderr
    assert (ws / "hello.txt").read_text() == "hi\n"
    assert "Writing it." in result.stdout and "Done: hello.txt created." in result.stdout
    assert "→ write(path=hello.txt" in result.stderr and "✓ write" in result.stderr
    sessions = list((tmp_path / "home" / "sessions").iterdir())
    assert len(sessions) == 1 and f"--session {sessions[0].name}" in result.stderr
    turns = [json.loads(line) for line in (sessions[0] / "history.jsonl").read_text().splitlines()]
    assert turns[0]["type"] == "turn_start" and turns[0]["source"] == "cli"


def test_continue_and_session_resume(tmp_path, sim):
    state, url = sim
    ws = tmp_path / "ws"
    ws.mkdir()
    state.set_script([{"text": "first answer"}, {"text": "second answer"}, {"text": "third answer"}])
    assert invoke(["run", "remember the word kiwi", *sim_args(url, ws)], tmp_path / "home").exit_code == 0
    result = invoke(["run", "what was the word?", "--continue", *sim_args(url, ws)], tmp_path / "home")
    assert result.exit_code == 0 and "second answer" in result.stdout
    body = json.dumps(state.requests()[-1]["body"])
    assert "remember the word kiwi" in body and "first answer" in body
    sid = next((tmp_path / "home" / "sessions").iterdir()).name
    result = invoke(["run", "and again?", "--session", sid, *sim_args(url, ws)], tmp_path / "home")
    assert result.exit_code == 0 and state.requests()[-1]["headers"].get("x-ctxscope-turn") == "3"
    result = invoke(["run", "x", "--session", "nope", *sim_args(url, ws)], tmp_path / "home")
    assert result.exit_code == 2 and "no agent session matches 'nope'" in result.stderr  # the one id rule
    result = invoke(["run", "x", "--continue", "--session", sid, *sim_args(url, ws)], tmp_path / "home")
    assert result.exit_code == 2


def test_a_failed_turn_exits_nonzero(tmp_path, sim):
    state, url = sim
    state.set_script([{"error": {"status": 400, "type": "invalid_request_error", "message": "bad things"}}])
    result = invoke(["run", "x", *sim_args(url, tmp_path)], tmp_path / "home")
    assert result.exit_code == 1 and "turn failed" in result.stderr and "bad things" in result.stderr


def test_missing_api_key_is_a_clear_error(tmp_path):
    result = invoke(["run", "x", "--provider", "anthropic"], tmp_path / "home", env={"ANTHROPIC_API_KEY": None})
    assert result.exit_code == 1 and "ANTHROPIC_API_KEY" in result.stderr


def test_chat_repl(tmp_path, sim):
    state, url = sim
    ws = tmp_path / "ws"
    ws.mkdir()
    state.set_script(
        [
            {"tool_calls": [{"name": "ls", "arguments": {}}]},
            {"text": "nothing here yet"},
            {"match": "<checkpoint-request>", "text": "## Goal\nlook around"},
            {"text": "bye then"},
        ]
    )
    lines = "what is here?\n/context\n/compact\n/nope\n\nthanks\n/quit\nnever sent\n"
    result = invoke(["chat", *sim_args(url, ws)], tmp_path / "home", input=lines)
    assert result.exit_code == 0, result.stderr
    assert "nothing here yet" in result.stdout and "bye then" in result.stdout
    assert "→ ls()" in result.stderr
    assert "source PROVIDER_USAGE_ANCHORED" in result.stdout  # /context after a real call
    assert "compacted: checkpoint at rung h0 (soft_fallback" in result.stderr
    assert "unknown command /nope" in result.stderr
    assert "never sent" not in json.dumps(state.requests())
    assert [r["headers"].get("x-ctxscope-turn") for r in state.requests()] == ["1", "1", "1", "2"]


def test_every_command_has_help():
    runner = CliRunner()
    for args in ([], ["run"], ["chat"], ["context"]):
        result = runner.invoke(agent_group, [*args, "--help"])
        assert result.exit_code == 0 and len(result.output) > 100
    assert agent_group.name == "agent" and set(agent_group.commands) == {"run", "chat", "report", "context"}


def test_context_follows_the_sessions_current_model_and_its_anchor(tmp_path, sim):
    """After a switch to another model on resume, `agent context S` measures against the new model and uses
    the usage anchor of its last answer."""
    state, url = sim
    ws = tmp_path / "ws"
    ws.mkdir()
    state.set_script([{"text": "first answer"}, {"text": "second answer"}])
    assert invoke(["run", "hello", "--model", "gpt-4.1", *sim_args(url, ws)], tmp_path / "home").exit_code == 0
    sid = next((tmp_path / "home" / "sessions").iterdir()).name
    before = json.loads(invoke(["context", sid, "--json"], tmp_path / "home").stdout)
    assert (before["model"], before["source"]) == ("gpt-4.1", "PROVIDER_USAGE_ANCHORED")
    result = invoke(
        ["run", "and now?", "--session", sid, "--model", "claude-sonnet-4-5", *sim_args(url, ws)], tmp_path / "home"
    )
    assert result.exit_code == 0, result.stderr
    after = json.loads(invoke(["context", sid, "--json"], tmp_path / "home").stdout)
    assert (after["model"], after["source"]) == ("claude-sonnet-4-5", "PROVIDER_USAGE_ANCHORED")
    assert after["window"] == 200_000 != before["window"]
    text = invoke(["context", sid], tmp_path / "home").stdout
    assert "claude-sonnet-4-5" in text and "source PROVIDER_USAGE_ANCHORED" in text
    meta_path = tmp_path / "home" / "sessions" / sid / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert (meta["provider"], meta["api"], meta["model"]) == ("sim", "openai-chat", "claude-sonnet-4-5")
    # a session written before meta.json followed the model: the first model, no api; the anchor says which
    meta_path.write_text(json.dumps({k: v for k, v in {**meta, "model": "gpt-4.1"}.items() if k != "api"}))
    legacy = json.loads(invoke(["context", sid, "--json"], tmp_path / "home").stdout)
    assert (legacy["model"], legacy["source"]) == ("claude-sonnet-4-5", "PROVIDER_USAGE_ANCHORED")
