"""Sessions on disk: append-only history with epochs, turn records with sources, state, resume, repair."""

from __future__ import annotations

import json

import pytest

from ctxscope.agent.core.messages import ToolCall, assistant_message, user_message
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.host.session_store import SessionNotFound, SessionStore
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call


def test_create_list_rename_delete(tmp_path):
    store = SessionStore(tmp_path)
    a = store.create(workspace="/w1", provider="sim", model="m")
    b = store.create(workspace="/w2")
    assert (tmp_path / "sessions" / a.id / "artifacts").is_dir()
    assert (tmp_path / "sessions" / a.id / "history.jsonl").exists()
    store.touch(a.id, turns=3)
    assert [m.id for m in store.list()] == [a.id, b.id]
    assert store.latest("/w2").id == b.id and store.latest("/elsewhere").id == a.id
    assert store.rename(b.id, "my title").title == "my title" and store.get(b.id).title == "my title"
    store.delete(a.id)
    with pytest.raises(SessionNotFound):
        store.get(a.id)
    with pytest.raises(SessionNotFound):
        store.get("../../etc")


def test_history_epochs_state_and_torn_lines(tmp_path):
    store = SessionStore(tmp_path)
    meta = store.create()
    h = store.history(meta.id)
    h.append_turn_start(1, "cli", "hello")
    h.append_message(0, user_message("hello"), 1)
    h.append_message(0, assistant_message("hi"), 1)
    h.append_state("todos", [{"content": "x", "status": "pending"}])
    h.append_replace(1, [user_message("summary")], "compaction", 1)
    h.append_message(1, assistant_message("after"), 1)
    h.append_turn_end(1, "completed", None)
    with open(h.path, "a") as f:
        f.write('{"type": "message", "epoch": 1, "mess')  # crash mid-write
    loaded = h.load()
    assert [m.text for m in loaded.messages] == ["summary", "after"] and loaded.epoch == 1
    assert loaded.state == {"todos": [{"content": "x", "status": "pending"}]}
    assert [(t.turn, t.source, t.text, t.outcome) for t in loaded.turns] == [(1, "cli", "hello", "completed")]
    types = [json.loads(line)["type"] for line in h.path.read_text().splitlines()[:-1]]
    assert types == ["turn_start", "message", "message", "state", "replace", "message", "turn_end"]


async def test_resume_continues_history_turn_numbers_and_state(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    model = ScriptedModel(
        [answer("", tool_call("todowrite", {"todos": [{"content": "a", "status": "pending"}]})), "noted"]
    )
    rt = AgentRuntime(model, home=tmp_path / "home", workspace=ws, host_builtins=[])
    s = rt.create_session()
    await s.run("plan it", source="cli")

    model2 = ScriptedModel(["resumed"])
    rt2 = AgentRuntime(model2, home=tmp_path / "home", workspace=ws, host_builtins=[])
    again = rt2.latest_session()
    assert again.id == s.id and again.turn == 1
    assert again.state.get("todos") == [{"id": "1", "content": "a", "status": "pending"}]
    r = await again.run("go on", source="api")
    assert r.turn == 2 and next(m.text for m in model2.requests[0].messages) == "plan it"
    assert model2.requests[0].headers["x-ctxscope-turn"] == "2"
    assert [(t.turn, t.source) for t in rt2.conversation.query.turns(s.id)] == [(1, "cli"), (2, "api")]
    assert rt2.store.get(s.id).turns == 2


async def test_a_crash_between_call_and_results_is_repaired_on_load(tmp_path):
    store = SessionStore(tmp_path / "home")
    meta = store.create(workspace=str(tmp_path))
    h = store.history(meta.id)
    h.append_message(0, user_message("do it"), 1)
    h.append_message(0, assistant_message("", [ToolCall("c1", "bash", {"command": "make"})]), 1)
    model = ScriptedModel(["ok"])
    rt = AgentRuntime(model, home=tmp_path / "home", workspace=tmp_path, host_builtins=[])
    s = rt.open_session(meta.id)
    assert s.messages[-1].role == "tool" and "interrupted" in s.messages[-1].tool_results[0].content
    assert s.history.epoch == 1
    await s.run("again")
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "tool", "user"]
    # the repair was persisted: loading again needs no further repair
    assert store.history(meta.id).load().messages == list(s.messages)
