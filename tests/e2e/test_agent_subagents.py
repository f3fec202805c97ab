"""`ctxscope agent run --provider sim` through the real daemon, with the simulator's agentic answers: a
multi-step session for any task, and a sub-agent that the inspector shows as a child thread of the
parent's session while the parent's own calls stay APPEND_ONLY."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxscope.agent.context.compaction.replace import build_appendix, render_appendix
from ctxscope.agent.core.history import HistoryFile
from ctxscope.agent.host.session_report_bundle import MANIFEST, bundle_session
from ctxscope.agent.host.session_store import SessionStore
from ctxscope.agent_commands import agent_group
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.analysis_rows import count_analysed


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "README.md").write_text("# Gadget store\n\nSells gadgets over HTTP.\n")
    (ws / "src" / "shop.py").write_text("def price(item):\n    return 3\n")
    return ws


def run_agent(proxy, home: Path, ws: Path, task: str, *extra: str):
    result = CliRunner().invoke(
        agent_group,
        ["run", task, "--provider", "sim", "--daemon", proxy.url, "--workspace", str(ws), *extra],
        env={"CTXSCOPE_HOME": str(home)},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    sessions = [m for m in SessionStore(home).list() if not m.parent_session]
    assert len(sessions) == 1
    return result, sessions[0].id


def analysed_calls(proxy, session: str, at_least: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while count_analysed(proxy.db_path, session) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    db = queries.open_db(proxy.db_path)
    try:
        rows = queries.list_calls(db, session=session, limit=None, newest_first=False)
        return [queries.get_call(db, r["id"]) for r in rows]
    finally:
        db.conn.close()


@pytest.mark.parametrize("api", ["openai-chat", "anthropic", "openai-responses"])
def test_agent_run_on_the_simulator_is_a_multi_step_session(proxy, tmp_path, workspace, api):
    result, session = run_agent(proxy, tmp_path / "home", workspace, "list the files and read the README", "--api", api)
    calls = analysed_calls(proxy, session, 3)
    assert len(calls) == 3 and all(c["thread"] == calls[0]["thread"] for c in calls)
    assert [c["relation"] for c in calls] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    db = queries.open_db(proxy.db_path)
    try:
        last_request = json.dumps(queries.get_request_json(db, calls[-1]["id"]))
    finally:
        db.conn.close()
    assert "Sells gadgets over HTTP." in last_request  # the read's result went back to the model
    assert "→ ls()" in result.stderr and "→ read(path=README.md)" in result.stderr
    assert 'README.md (3 lines shown) begins: "# Gadget store"' in result.stdout
    assert "2 entries: README.md, src/" in result.stdout


def test_a_sub_agent_is_a_child_thread_and_the_parent_stays_append_only(proxy, tmp_path, workspace):
    home = tmp_path / "home"
    result, session = run_agent(proxy, home, workspace, "Ask a sub-agent to list the files and read the README")
    store = SessionStore(home)
    children = [m for m in store.list() if m.parent_session == session]
    assert len(children) == 1
    child = children[0].id

    calls = analysed_calls(proxy, session, 5)
    subagent = [c for c in calls if ["x-ctxscope-subagent", child] in (c["annotations"] or [])]
    parent = [c for c in calls if c not in subagent]
    assert len(parent) == 2 and len(subagent) == 3
    main = parent[0]["thread"]
    assert all(c["thread"] == main for c in parent)
    assert [c["relation"] for c in parent] == ["EPOCH_START", "APPEND_ONLY"]
    assert parent[0]["seq"] < subagent[0]["seq"] and subagent[-1]["seq"] < parent[1]["seq"]  # the child ran between
    child_thread = subagent[0]["thread"]
    assert child_thread != main and all(c["thread"] == child_thread for c in subagent)
    assert subagent[0]["parent_thread"] == main
    assert [c["relation"] for c in subagent] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    db = queries.open_db(proxy.db_path)
    try:
        tree = queries.session_threads(db, session)
    finally:
        db.conn.close()
    assert [t["thread"] for t in tree] == [main] and [t["thread"] for t in tree[0]["children"]] == [child_thread]

    # the child's answer came back as the task tool's result, and the parent answered from it
    assert "→ task(" in result.stderr
    assert 'README.md (3 lines shown) begins: "# Gadget store"' in result.stdout
    child_history = HistoryFile(store.dir(child) / "history.jsonl").load()
    assert child_history.messages[0].text.startswith("list the files and read the README")
    assert [t.outcome for t in child_history.turns] == ["completed"]

    # the parent's state records the run; the checkpoint appendix carries it
    loaded = HistoryFile(store.dir(session) / "history.jsonl").load()
    runs = loaded.state["subagents"]
    assert runs[child]["outcome"] == "completed" and runs[child]["steps"] == 3
    appendix = render_appendix(build_appendix(loaded.messages, loaded.state, turn=1, step=2))
    assert "### Sub-agents" in appendix and child in appendix

    # the session report bundles the child's session with its parent
    bundle = bundle_session(home, session, tmp_path / "report.tar.gz")
    assert bundle.sessions == (session, child)
    with tarfile.open(bundle.archive) as tar:
        manifest = json.load(tar.extractfile(MANIFEST))
        names = tar.getnames()
    assert {"id": child, "parent": session, "dir": f"sessions/{child}"} in manifest["sessions"]
    assert f"sessions/{child}/history.jsonl" in names and f"sessions/{child}/llm-call.json" in names


def test_a_sub_agents_session_is_never_the_one_to_continue(proxy, tmp_path, workspace):
    home = tmp_path / "home"
    _, session = run_agent(proxy, home, workspace, "delegate: read src/shop.py")
    assert SessionStore(home).latest(str(workspace)).id == session


async def test_the_child_has_its_own_tools_budget_and_headers(tmp_path, workspace):
    from ctxscope.agent.core.settings import HostOptions
    from ctxscope.agent.host.builtins import default_host_builtins
    from ctxscope.agent.host.runtime import AgentRuntime
    from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
    from ctxscope.vocab.headers import Annotation

    SESSION, SUBAGENT_HEADER = Annotation.SESSION, Annotation.SUBAGENT

    home = tmp_path / "home"
    loop = [answer("", tool_call("ls", {})) for _ in range(2)]  # the child never gets to answer
    model = ScriptedModel(
        [
            answer("", tool_call("task", {"description": "look", "prompt": "list it", "max_steps": 2})),
            *loop,
            "the parent saw the error",
        ]
    )
    rt = AgentRuntime(
        model,
        home=home,
        workspace=workspace,
        host_builtins=default_host_builtins(HostOptions(home, {"subagents": {"maxSteps": 5}})),
    )
    s = rt.create_session()
    result = await s.run("delegate")
    await rt.aclose()
    assert result.ok and result.text == "the parent saw the error"
    parent_tools = [t.name for t in model.requests[0].tools]
    child_tools = [t.name for t in model.requests[1].tools]
    assert "task" in parent_tools and child_tools == ["read", "ls", "grep", "bash"]
    assert len(model.requests) == 4  # parent, two child steps (its budget), parent
    child_headers = [c.headers for c in model.calls[1:3]]
    assert all(h[SESSION] == s.id and h[SUBAGENT_HEADER] != s.id for h in child_headers)
    assert SUBAGENT_HEADER not in model.calls[0].headers and SUBAGENT_HEADER not in model.calls[3].headers
    tool_result = model.requests[3].messages[-1].tool_results[0]
    assert tool_result.is_error and "the sub-agent stopped (max_steps" in tool_result.content
    assert s.state.get("subagents")[child_headers[0][SUBAGENT_HEADER]]["outcome"] == "max_steps"


async def test_two_sub_agents_are_two_child_threads_of_the_main_thread(proxy, sim, tmp_path, workspace):
    from ctxscope.agent.host.runtime import AgentRuntime
    from ctxscope.agent.providers.catalog import make_client, resolve

    def task(description: str) -> dict:
        return {"tool_calls": [{"name": "task", "arguments": {"description": description, "prompt": description}}]}

    ls = {"tool_calls": [{"name": "ls", "arguments": {}}]}
    sim.state().set_script(
        [
            task("first look"),
            ls,
            ls,
            {"text": "child A done"},
            task("second look"),
            ls,
            {"text": "child B done"},
            {"text": "parent done"},
        ]
    )
    client = make_client(resolve("sim", api="anthropic", model="claude-sonnet-4-5", proxy=proxy.url))
    rt = AgentRuntime(client, home=tmp_path / "home", workspace=workspace)
    s = rt.create_session()
    result = await s.run("two looks")
    await rt.aclose()
    assert result.ok and result.text == "parent done"

    calls = analysed_calls(proxy, s.id, 8)
    by_child: dict[str | None, list[dict]] = {}
    for c in calls:
        child = next((v for k, v in c["annotations"] if k == "x-ctxscope-subagent"), None)
        by_child.setdefault(child, []).append(c)
    parent = by_child.pop(None)
    main = parent[0]["thread"]
    assert [c["relation"] for c in parent] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert all(c["thread"] == main for c in parent)
    assert [len(v) for v in by_child.values()] == [3, 2]
    threads = {v[0]["thread"] for v in by_child.values()}
    assert len(threads) == 2 and main not in threads
    assert all(v[0]["parent_thread"] == main and v[0]["relation"] == "EPOCH_START" for v in by_child.values())
    assert all(c["relation"] == "APPEND_ONLY" for v in by_child.values() for c in v[1:])
    assert set(s.state.get("subagents")) == set(by_child)
