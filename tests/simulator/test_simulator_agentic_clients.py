"""The simulated agent answers real agent CLIs with their own shell tool, in that tool's argument
shape, so a session recorded from Claude Code, Codex, pi, opencode or Gemini CLI has tool rounds."""

from __future__ import annotations

import json

import pytest

from ctxscope.simulator.model.agent_view import AgentView, Round
from ctxscope.simulator.model.agentic import decide
from ctxscope.simulator.model.agentic_answer import final_answer


@pytest.mark.parametrize(
    ("tools", "name", "arguments"),
    [
        (("Read", "Bash", "Glob"), "Bash", {"command": "ls"}),
        (("exec_command", "apply_patch"), "exec_command", {"cmd": "ls"}),
        (("shell", "update_plan"), "shell", {"command": ["bash", "-lc", "ls"]}),
        (("read", "bash", "edit"), "bash", {"command": "ls"}),
        (("run_shell_command", "read_file"), "run_shell_command", {"command": "ls"}),
    ],
)
def test_each_clients_shell_lists_then_runs_the_quoted_command(tools, name, arguments):
    view = AgentView(task="run `make test` and tell me", tools=tools, rounds=())
    first = decide(view).call
    assert first is not None and (first.name, json.loads(first.arguments)) == (name, arguments)
    listed = Round(name, arguments, "a.py\nMakefile", False)
    second = decide(AgentView(task=view.task, tools=tools, rounds=(listed,))).call
    assert second is not None and second.name == name and "make test" in second.arguments
    ran = Round(name, json.loads(second.arguments), "ok\n[exit code 0]", False)
    done = AgentView(task=view.task, tools=tools, rounds=(listed, ran))
    assert decide(done).call is None
    answer = final_answer(done)
    assert "The workspace holds 2 entries: a.py, Makefile." in answer and "`make test` exited with code 0" in answer
