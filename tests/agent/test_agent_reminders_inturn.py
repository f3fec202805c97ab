"""In-turn reminders and their admission, driven through the real loop with a scripted model."""

from __future__ import annotations

from ctxscope.agent.core.messages import user_message
from ctxscope.agent.core.model import ModelRequest
from ctxscope.agent.core.state import SessionState
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.anthropic import build_body
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.reminders.admission import fits_reminder_in_final_request, provider_input_limit, request_tokens
from ctxscope.agent.reminders.extension import in_turn_reminders_extension
from ctxscope.agent.reminders.inturn import InTurnReminders, count_iteration, read_counters, todo_cadence_due
from ctxscope.agent.tools.core_tools import core_tools_extension

OPEN_TODOS = [
    {"id": "1", "content": "port the parser", "status": "in_progress"},
    {"id": "2", "content": "write tests", "status": "pending"},
]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(tmp_path, script, reminders: InTurnReminders):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension()],
        host_builtins=[in_turn_reminders_extension(reminders)],
    )
    return rt, model, rt.create_session()


def ls_steps(n):
    return [answer("", tool_call("ls", {})) for _ in range(n)]


def kinds(request):
    return [m.meta.get("kind") for m in request.messages]


# --- execution deadline ---------------------------------------------------------------------------


async def test_deadline_rides_on_each_request_only_and_is_never_persisted(tmp_path):
    clock = Clock()

    def tick(req):
        clock.now += 25
        return answer("", tool_call("ls", {}))

    _rt, model, s = make(tmp_path, [tick, "done"], InTurnReminders(deadline_seconds=100, clock=clock))
    r = await s.run("go")
    assert r.ok and len(model.requests) == 2
    first, second = model.requests
    assert first.messages[-1].meta["request_only"] and "about 100 seconds remain" in first.messages[-1].text
    assert "about 75 seconds remain" in second.messages[-1].text
    assert "about 100" not in " ".join(m.text for m in second.messages)  # the old one is gone
    assert not any(m.meta.get("kind") == "deadline_reminder" for m in s.messages)  # never persisted
    assert first.headers["x-ctxscope-event"] == "reminder; source=deadline; remaining_s=100"


async def test_a_spent_deadline_asks_for_the_final_answer(tmp_path):
    clock = Clock()

    def late(req):
        clock.now += 500
        return answer("", tool_call("ls", {}))

    _rt, model, s = make(tmp_path, [late, "done"], InTurnReminders(deadline_seconds=60, clock=clock))
    await s.run("go")
    assert "used up" in model.requests[1].messages[-1].text
    assert "remaining_s=0" in model.requests[1].headers["x-ctxscope-event"]


async def test_no_deadline_no_message_and_a_session_can_set_its_own(tmp_path):
    _rt, model, s = make(tmp_path, ["a", "b"], InTurnReminders(clock=Clock()))
    await s.run("go")
    assert kinds(model.requests[0]) == ["input"]
    s.state.set("turn_deadline_seconds", 30)
    await s.run("again")
    assert model.requests[1].messages[-1].meta["kind"] == "deadline_reminder"


def test_anthropic_breakpoint_stays_in_front_of_the_request_only_reminder():
    persisted = user_message("tool output and the question")
    deadline = user_message("<system-reminder>about 10 seconds</system-reminder>", request_only=True)
    body = build_body(ModelRequest("sys", (), (persisted, deadline), 100), "claude-x")
    blocks = body["messages"][-1]["content"]  # same role: merged into one wire message
    assert [b.get("cache_control") for b in blocks] == [{"type": "ephemeral"}, None]
    plain = build_body(ModelRequest("sys", (), (persisted,), 100), "claude-x")
    assert plain["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


# --- todo cadence ------------------------------------------------------------------------------------


def test_cadence_counters_need_both_fifteen_since_the_write_and_since_the_reminder():
    state = SessionState()
    for _ in range(14):
        count_iteration(state, wrote_todos=False)
    assert not todo_cadence_due(read_counters(state))
    count_iteration(state, wrote_todos=False)
    assert todo_cadence_due(read_counters(state))
    count_iteration(state, wrote_todos=True)
    assert read_counters(state)["since_todowrite"] == 0 and not todo_cadence_due(read_counters(state))
    state.set("todo_cadence", {"since_todowrite": 30, "since_reminder": 14})
    assert not todo_cadence_due(read_counters(state))


async def test_todo_cadence_is_appended_hidden_after_fifteen_iterations_then_waits_fifteen_more(tmp_path):
    _rt, model, s = make(tmp_path, ls_steps(32) + ["done"], InTurnReminders())
    s.state.set("todos", OPEN_TODOS)
    await s.run("work")
    fired = [i for i, q in enumerate(model.requests) if q.messages[-1].meta.get("kind") == "todo_reminder"]
    assert fired == [15, 30]  # request 16 follows 15 iterations; the next one 15 iterations later
    reminder = model.requests[15].messages[-1]
    assert reminder.meta["hidden"] and "[>] port the parser" in reminder.text and "todowrite" in reminder.text
    assert reminder in s.messages  # appended to history (persisted)
    assert model.requests[15].headers["x-ctxscope-event"].startswith("todo_reminder; since_todowrite=15; open=2")
    # cadence counters survive as session state, e.g. for the compaction appendix
    assert read_counters(s.state)["since_todo_reminder"] == 3


async def test_a_todowrite_restarts_the_todo_cadence(tmp_path):
    write = answer("", tool_call("todowrite", {"todos": [{"content": "port the parser", "status": "in_progress"}]}))
    _rt, model, s = make(tmp_path, ls_steps(10) + [write] + ls_steps(20) + ["done"], InTurnReminders())
    s.state.set("todos", OPEN_TODOS)
    await s.run("work")
    fired = [i for i, q in enumerate(model.requests) if q.messages[-1].meta.get("kind") == "todo_reminder"]
    assert fired == [26]  # 15 iterations after the write at request 11


async def test_no_open_todos_no_cadence(tmp_path):
    _rt, _model, s = make(tmp_path, ls_steps(20) + ["done"], InTurnReminders())
    await s.run("work")
    assert not any(m.meta.get("kind") == "todo_reminder" for m in s.messages)


async def test_background_cadence_waits_for_its_turn_behind_the_todo_cadence(tmp_path):
    _rt, model, s = make(tmp_path, ls_steps(17) + ["done"], InTurnReminders())
    s.state.set("todos", OPEN_TODOS)
    s.state.set(
        "background_tasks",
        [
            {"id": "t1", "status": "running", "description": "npm run build"},
            {"id": "t2", "status": "done", "description": "lint"},
        ],
    )
    await s.run("work")
    last = [q.messages[-1].meta.get("kind") for q in model.requests]
    assert last[15] == "todo_reminder" and last[16] == "background_reminder"  # one append per request
    bg = model.requests[16].messages[-1]
    assert "t1: npm run build" in bg.text and "lint" not in bg.text
    assert "reminder; source=background_tasks; running=1" in model.requests[16].headers["x-ctxscope-event"]


# --- admission ------------------------------------------------------------------------------------------


def test_provider_input_limit_matches_the_budget_lines():
    assert provider_input_limit(128_000, 16_000) == 109_952
    assert provider_input_limit(200_000, 32_000) == 165_952
    assert provider_input_limit(20_000, 16_000) == 3_616  # window - reserve binds (the output floor applies)


def test_fits_counts_the_reminder_against_the_limit():
    assert fits_reminder_in_final_request(90, "short", 100)
    assert not fits_reminder_in_final_request(98, "short", 100)


def test_the_request_estimate_sees_messages_and_tool_declarations():
    m = user_message("hello world " * 50)
    a = request_tokens("system", (), (m,))
    assert a > 100
    from ctxscope.agent.tools.core_tools import CORE_TOOLS

    assert request_tokens("system", tuple(t.spec() for t in CORE_TOOLS), (m,)) > a + 100


async def test_a_reminder_that_would_overflow_the_input_limit_is_dropped(tmp_path):
    _rt, model, s = make(
        tmp_path,
        ls_steps(16) + ["done"],
        InTurnReminders(deadline_seconds=100, clock=Clock(), input_limit=lambda m: 50),
    )
    s.state.set("todos", OPEN_TODOS)
    await s.run("x" * 40)
    assert all(
        m.meta.get("kind") not in ("deadline_reminder", "todo_reminder") for q in model.requests for m in q.messages
    )
    assert "reminder_dropped; source=deadline" in model.requests[0].headers["x-ctxscope-event"]
    assert "reminder_dropped; source=todo_cadence" in model.requests[15].headers["x-ctxscope-event"]


async def test_the_same_reminder_is_admitted_under_a_roomy_limit(tmp_path):
    _rt, model, s = make(
        tmp_path, ["done"], InTurnReminders(deadline_seconds=100, clock=Clock(), input_limit=lambda m: 100_000)
    )
    await s.run("x" * 40)
    assert model.requests[0].messages[-1].meta["kind"] == "deadline_reminder"


def test_the_compaction_appendix_carries_the_cadence_counters():
    from ctxscope.agent.context.compaction.replace import build_appendix, render_appendix

    state = SessionState()
    state.set("todos", OPEN_TODOS)
    state.set("background_tasks", [{"id": "t1", "status": "running", "description": "build"}])
    for _ in range(7):
        count_iteration(state, wrote_todos=False)
    text = render_appendix(build_appendix([], state.snapshot(), turn=3, step=4))
    assert '"since_todowrite": 7' in text and '"since_reminder": 7' in text and "background_cadence" in text
