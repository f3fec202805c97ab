"""The simulator's agentic answers, judged by the real SDKs: with tools declared and no script queued it
lists, reads, greps and runs what the task names, then answers from the results, in each API's shape."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ctxscope.simulator.model.agent_view import read_view
from ctxscope.simulator.model.agentic import MAX_ROUNDS, decide
from ctxscope.simulator.model.prompt import anthropic_prompt

from support import sdk_clients

TASK = 'list the files and read the README, then grep for "TODO" and run `wc -l README.md`'
SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}, "command": {"type": "string"}},
}
NAMES = ("ls", "read", "grep", "bash")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text("# Widget service\n\nServes widgets.\nTODO: document the cache\n")
    (tmp_path / "app.py").write_text("print('widgets')\n")
    (tmp_path / "src").mkdir()
    return tmp_path


def run_tool(root: Path, name: str, args: dict) -> str:
    """The tools the test plays for the model: real reads of a real folder."""
    if name == "ls":
        return "\n".join(p.name + ("/" if p.is_dir() else "") for p in sorted(root.iterdir()))
    if name == "read":
        return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate((root / args["path"]).read_text().splitlines(), 1))
    if name == "grep":
        hits = [
            f"{p.name}:{n}: {line}"
            for p in sorted(root.iterdir())
            if p.is_file()
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if args["pattern"] in line
        ]
        return "\n".join(hits) or "No matches found."
    out = subprocess.run(["bash", "-c", args["command"]], cwd=root, capture_output=True, text=True, check=False)
    return f"{out.stdout.strip()}\n[exit code {out.returncode}]"


def anthropic_session(base_url: str, root: Path, task: str) -> tuple[list[tuple[str, dict]], str]:
    client = sdk_clients.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0)
    tools = [{"name": n, "description": n, "input_schema": SCHEMA} for n in NAMES]
    messages: list[dict] = [{"role": "user", "content": task}]
    calls: list[tuple[str, dict]] = []
    for _ in range(MAX_ROUNDS + 2):
        msg = client.messages.create(model="claude-sim", max_tokens=512, tools=tools, messages=messages)
        uses = [b for b in msg.content if b.type == "tool_use"]
        if not uses:
            assert msg.stop_reason == "end_turn"
            return calls, "".join(b.text for b in msg.content if b.type == "text")
        assert msg.stop_reason == "tool_use"
        messages.append({"role": "assistant", "content": [b.model_dump() for b in msg.content]})
        results = []
        for use in uses:
            calls.append((use.name, dict(use.input)))
            results.append(
                {"type": "tool_result", "tool_use_id": use.id, "content": run_tool(root, use.name, dict(use.input))}
            )
        messages.append({"role": "user", "content": results})
    raise AssertionError("the simulated agent did not stop")


def chat_session(base_url: str, root: Path, task: str) -> tuple[list[tuple[str, dict]], str]:
    client = sdk_clients.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "function": {"name": n, "description": n, "parameters": SCHEMA}} for n in NAMES]
    messages: list[dict] = [{"role": "system", "content": "You are a test agent."}, {"role": "user", "content": task}]
    calls: list[tuple[str, dict]] = []
    for _ in range(MAX_ROUNDS + 2):
        choice = client.chat.completions.create(model="gpt-sim", tools=tools, messages=messages).choices[0]
        if not choice.message.tool_calls:
            assert choice.finish_reason == "stop"
            return calls, choice.message.content or ""
        assert choice.finish_reason == "tool_calls"
        messages.append(choice.message.model_dump(exclude_none=True))
        for call in choice.message.tool_calls:
            args = json.loads(call.function.arguments)
            calls.append((call.function.name, args))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": run_tool(root, call.function.name, args)}
            )
    raise AssertionError("the simulated agent did not stop")


def responses_session(base_url: str, root: Path, task: str) -> tuple[list[tuple[str, dict]], str]:
    client = sdk_clients.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "name": n, "description": n, "parameters": SCHEMA} for n in NAMES]
    items: list = [{"role": "user", "content": task}]
    calls: list[tuple[str, dict]] = []
    for _ in range(MAX_ROUNDS + 2):
        response = client.responses.create(model="gpt-sim", tools=tools, input=items)
        fcs = [o for o in response.output if o.type == "function_call"]
        if not fcs:
            return calls, response.output_text
        for fc in fcs:
            args = json.loads(fc.arguments)
            calls.append((fc.name, args))
            items += [
                {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
                {"type": "function_call_output", "call_id": fc.call_id, "output": run_tool(root, fc.name, args)},
            ]
    raise AssertionError("the simulated agent did not stop")


EXPECTED_CALLS = [
    ("ls", {}),
    ("read", {"path": "README.md"}),
    ("grep", {"pattern": "TODO", "max_results": 20}),
    ("bash", {"command": "wc -l README.md"}),
]


@pytest.mark.parametrize(
    "session", [anthropic_session, chat_session, responses_session], ids=["anthropic", "chat", "responses"]
)
def test_each_api_gets_a_small_agent_that_answers_from_its_tool_results(sim_alone, workspace, session):
    calls, answer = session(sim_alone.base_url, workspace, TASK)
    assert calls == EXPECTED_CALLS
    assert "3 entries: README.md, app.py, src/" in answer
    assert 'README.md (4 lines shown) begins: "# Widget service"' in answer
    assert "README.md:4: TODO: document the cache" in answer
    assert "`wc -l README.md` exited with code 0; it printed: 4 README.md" in answer


def test_same_task_and_workspace_give_the_same_calls(sim_alone, workspace):
    first = chat_session(sim_alone.base_url, workspace, "read app.py and find print")
    sim_alone.state.reset()
    again = chat_session(sim_alone.base_url, workspace, "read app.py and find print")
    assert first == again
    assert first[0] == [("ls", {}), ("read", {"path": "app.py"}), ("grep", {"pattern": "print", "max_results": 20})]


def test_a_task_naming_nothing_lists_then_answers(sim_alone, workspace):
    calls, answer = anthropic_session(sim_alone.base_url, workspace, "look around")
    assert calls == [("ls", {})]
    assert answer.startswith("Done: look around") and "3 entries" in answer


def test_a_named_file_that_is_not_there_is_tried_and_reported(sim_alone, workspace):
    (workspace / "README.md").unlink()

    def tools(root: Path, name: str, args: dict) -> str:
        if name == "read" and not (root / args["path"]).exists():
            return f"Error: file not found: {args['path']}"
        return run_tool(root, name, args)

    client = sdk_clients.OpenAI(base_url=sim_alone.base_url + "/v1", api_key="sk-test", max_retries=0)
    specs = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in NAMES]
    messages: list[dict] = [{"role": "user", "content": "list the files and read the README, e.g. its title"}]
    calls = []
    while True:
        message = client.chat.completions.create(model="gpt-sim", tools=specs, messages=messages).choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            calls.append((call.function.name, args))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": tools(workspace, call.function.name, args)}
            )
    assert calls == [("ls", {}), ("read", {"path": "README"})]  # "e.g" is no file name
    assert 'read {"path": "README"} failed: Error: file not found: README' in (message.content or "")


def test_a_failed_read_is_reported_not_retried(sim_alone, workspace):
    (workspace / "README.md").unlink()
    client = sdk_clients.Anthropic(base_url=sim_alone.base_url, api_key="sk-ant-test", max_retries=0)
    tools = [{"name": n, "description": n, "input_schema": SCHEMA} for n in NAMES]
    messages = [
        {"role": "user", "content": "read notes/plan.md"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "app.py\nsrc/"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "notes/plan.md"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": "Error: file not found: notes/plan.md",
                }
            ],
        },
    ]
    msg = client.messages.create(model="claude-sim", max_tokens=256, tools=tools, messages=messages)
    text = msg.content[0].text
    assert msg.stop_reason == "end_turn" and "failed: Error: file not found: notes/plan.md" in text


def test_without_tools_or_with_a_queued_step_the_answers_stay_as_they_were(sim_alone, workspace):
    client = sdk_clients.OpenAI(base_url=sim_alone.base_url + "/v1", api_key="sk-test", max_retries=0)
    plain = client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "list the files"}])
    assert plain.choices[0].message.content == "sim: list the files"
    sim_alone.state.set_script([{"match": "never sent", "text": "reserved"}])
    tools = [{"type": "function", "function": {"name": "ls", "parameters": SCHEMA}}]
    queued = client.chat.completions.create(
        model="gpt-sim", tools=tools, messages=[{"role": "user", "content": "list the files"}]
    )
    assert queued.choices[0].message.content == "sim: list the files" and not queued.choices[0].message.tool_calls


def test_the_plan_reads_reminders_out_and_stops_within_its_rounds():
    body = {
        "model": "claude-sim",
        "max_tokens": 10,
        "tools": [{"name": "ls", "input_schema": SCHEMA}, {"name": "task", "input_schema": SCHEMA}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>\ncwd is /tmp\n</system-reminder>"},
                    {"type": "text", "text": "Ask a sub-agent to list the files and read the README"},
                ],
            }
        ],
    }
    view = read_view(anthropic_prompt(body))
    assert view.task == "Ask a sub-agent to list the files and read the README" and view.tools == ("ls", "task")
    call = decide(view).call
    assert call is not None and call.name == "task"
    assert call.input_object()["prompt"] == "list the files and read the README"
    loop = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "ls", "input": {"i": i}}]}
        for i in range(MAX_ROUNDS)
    ]
    body["messages"] = [{"role": "user", "content": "list the files"}, *loop]
    assert decide(read_view(anthropic_prompt(body))).call is None  # out of rounds: the final answer


def test_a_steer_while_tools_run_is_no_new_task_but_the_next_turn_is():
    tools = [{"name": n, "input_schema": SCHEMA} for n in NAMES]

    def view(*messages: dict):
        return read_view(
            anthropic_prompt({"model": "claude-sim", "max_tokens": 10, "tools": tools, "messages": list(messages)})
        )

    user = {"role": "user", "content": "read app.py"}
    ls = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]}
    listed = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "app.py"},
            {"type": "text", "text": "please hurry"},
        ],
    }
    steered = view(user, ls, listed)
    assert steered.task == "read app.py" and [r.name for r in steered.rounds] == ["ls"]
    assert decide(steered).call == decide(view(user, ls, {**listed, "content": listed["content"][:1]})).call
    answered = {"role": "assistant", "content": [{"type": "text", "text": "app.py prints."}]}
    nxt = view(user, ls, listed, answered, {"role": "user", "content": "now grep for print"})
    assert nxt.task == "now grep for print" and nxt.rounds == ()
    summary = {"role": "user", "content": "The earlier part of this conversation was compacted."}
    assert view(summary, {"role": "user", "content": "list the files"}).task == "list the files"
