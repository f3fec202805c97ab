"""Our agent's own traffic through the real daemon, as the inspector classifies it.

With every default extension and host builtin on (reminders, guard, tool-output budget, report),
the runtime keeps the prompt prefix stable: within a turn each call is APPEND_ONLY on the previous
one, which `ctxscope calls --json` shows.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy
from ctxscope.main import cli

MODELS = {"anthropic": "claude-sonnet-4-6", "openai-chat": "gpt-4.1", "openai-responses": "gpt-4.1"}


@pytest.mark.parametrize("api", ["anthropic", "openai-chat", "openai-responses"])
async def test_agent_turns_are_append_only_in_the_inspector(api, proxy, sim, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    sim.state().set_script(
        [
            {
                "text": "Reading.",
                "tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}, {"name": "ls", "arguments": {}}],
            },
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "beta"}}]},
            {"text": "notes.txt has two lines."},
            {"tool_calls": [{"name": "write", "arguments": {"path": "out.txt", "content": "done\n"}}]},
            {"text": "Wrote out.txt."},
        ]
    )
    settings = resolve("sim", api=api, model=MODELS[api], proxy=proxy.url)
    rt = AgentRuntime(make_client(settings, retry=RetryPolicy(max_retries=0)), home=tmp_path / "home", workspace=ws)
    session = rt.create_session()
    first = await session.run("what is in notes.txt?", source="api")
    second = await session.run("now write out.txt", source="api")
    await rt.aclose()
    assert (first.outcome, second.outcome) == ("completed", "completed")
    assert (ws / "out.txt").read_text() == "done\n"

    proxy.wait_for_calls(5)
    out = CliRunner().invoke(cli, ["calls", "--db", str(proxy.db_path), "--session", session.id, "--json"])
    calls = sorted(json.loads(out.output), key=lambda c: c["seq"])
    assert len(calls) == 5
    relations = [c["relation"] for c in calls]
    assert relations[0] == "EPOCH_START" and calls[0]["epoch_reason"] == "session_start"
    # turn 1 is calls 1-3, turn 2 calls 4-5: every call extends the previous one, across turns too
    assert relations[1:] == ["APPEND_ONLY"] * 4, [(c["relation"], c["pointer"]) for c in calls]
