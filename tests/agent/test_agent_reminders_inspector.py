"""Reminders keep the cached prefix intact, as the inspector sees it.

The real agent (Anthropic wire API) talks through the real daemon to the simulator with every kind
of reminder on: the round block in each turn's message, a request-only deadline on every request,
a hidden todo cadence message. Every call must stay APPEND_ONLY, or diverge only after the
previous call's last cache breakpoint (the volatile deadline sits behind it).
"""

from __future__ import annotations

import re

from ctxscope.agent.core.settings import HostOptions
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.reminders.extension import create_in_turn_reminders, create_system_reminders
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.inspector.store import queries

STEPS = (
    [{"tool_calls": [{"name": "ls", "arguments": {}}]}] * 3
    + [{"text": "first turn done"}]
    + [{"tool_calls": [{"name": "ls", "arguments": {}}]}]
    + [{"text": "second turn done"}]
)


def last_breakpoint(body: dict) -> tuple[int, int] | None:
    """(message index, block index) of the last cache_control in the messages."""
    found = None
    for i, m in enumerate(body["messages"]):
        for j, b in enumerate(m["content"] if isinstance(m["content"], list) else []):
            if b.get("cache_control"):
                found = (i, j)
    return found


def position(pointer: str) -> tuple[int, int]:
    m = re.match(r"^/messages/(\d+)(?:/content/(\d+))?", pointer)
    assert m, pointer
    return int(m.group(1)), int(m.group(2) or 0)


async def test_reminders_keep_each_call_append_only_or_diverging_behind_the_last_breakpoint(proxy, sim, tmp_path):
    sim.state().set_script(STEPS)
    home = tmp_path / "agent-home"
    settings = {"contextManagement": {"turnDeadlineSeconds": 600}}
    opts = HostOptions(home, settings)
    cadence = create_in_turn_reminders(opts)
    client = make_client(resolve("sim", api="anthropic", model="claude-sonnet-4-5", proxy=proxy.url))
    rt = AgentRuntime(
        client,
        home=home,
        workspace=tmp_path,
        extensions=[core_tools_extension()],
        host_builtins=[create_system_reminders(opts), cadence],
    )
    s = rt.create_session()
    s.state.set("todos", [{"id": "1", "content": "list the files", "status": "in_progress"}])
    s.state.set("todo_cadence", {"since_todowrite": 40, "since_reminder": 14})
    assert (await s.run("look around")).ok
    assert (await s.run("and again")).ok
    await rt.aclose()

    rows = proxy.wait_for_calls(6)
    db = queries.open_db(proxy.db_path)
    try:
        bodies = [queries.get_request_json(db, r["id"]) for r in rows]
    finally:
        db.conn.close()
    assert next(r["relation"] for r in rows) == "EPOCH_START"
    assert all("Time budget" in str(b["messages"][-1]) for b in bodies)  # every request carries the deadline
    assert any("has not changed in the last" in str(b["messages"]) for b in bodies)  # the todo cadence fired
    assert "<agent-context" in str(bodies[4]["messages"][-1])  # turn 2's round block
    diverged = 0
    for prev, row in zip(bodies, rows[1:], strict=False):
        assert row["relation"] in ("APPEND_ONLY", "DIVERGED"), row
        if row["relation"] == "DIVERGED":
            diverged += 1
            assert position(row["pointer"]) > last_breakpoint(prev), (row["pointer"], last_breakpoint(prev))
    assert diverged == 5  # each call drops the previous call's deadline, behind its breakpoint
