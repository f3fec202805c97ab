"""The runaway guard in real turns: one steering reminder per turn, per-turn keys, config rules, verifier
turns, the three events, and real bash greps that find nothing."""

from __future__ import annotations

import json

from ctxscope.agent.core.settings import HostOptions
from ctxscope.agent.guard.extension import (
    EVENTS_FILE,
    OVERRIDE_FILE,
    RunawayGuard,
    create_runaway_guard,
    resolve_config,
    runaway_guard_extension,
)
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, e):
        self.events.append(e)

    def names(self):
        return [e.name for e in self.events]


def make(tmp_path, script, guard=None, host=None):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\n")
    model = ScriptedModel(script)
    rec = Recorder()
    guard = guard or RunawayGuard(on_signal=rec, on_reminder=rec, on_turn_summary=rec)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension()],
        host_builtins=[host or runaway_guard_extension(guard)],
    )
    return rt, model, rt.create_session(), rec


def same(n, name="read", **args):
    return [answer("", tool_call(name, args or {"path": "a.txt"})) for _ in range(n)]


def guard_messages(request):
    return [m for m in request.messages if m.meta.get("kind") == "guard_reminder"]


async def test_a_repeated_call_is_reminded_once_per_turn_as_a_steering_message(tmp_path):
    _rt, model, s, rec = make(tmp_path, same(6) + ["done"])
    r = await s.run("go")
    assert r.ok and r.steps == 7
    hits = [i for i, q in enumerate(model.requests) if guard_messages(q)]
    assert hits[0] == 3  # the request after the third identical step
    assert all(len(guard_messages(q)) == 1 for q in model.requests[3:])  # one reminder in the whole turn
    msg = guard_messages(model.requests[3])[0]
    assert msg.role == "user" and msg.meta["hidden"] and msg.meta["signal"] == "repeated_action"
    assert model.requests[3].messages[-1] is msg  # delivered right before the next model request
    assert "Do not repeat that action unchanged" in msg.text and "this turn only" in msg.text
    assert "do not store it in memory" in msg.text.lower() or "Do not store it in memory" in msg.text
    event = model.requests[3].headers["x-ctxscope-event"]
    assert "guard_reminder; signal=repeated_action; count=3" in event and "steer" in event
    assert "guard_signal; kind=repeated_action; count=2" in model.requests[2].headers["x-ctxscope-event"]
    assert rec.names().count("runaway_guard_reminder_injected") == 1


async def test_the_next_turn_may_remind_again(tmp_path):
    _rt, _model, s, rec = make(tmp_path, same(3) + ["done"] + same(3) + ["done"])
    await s.run("one")
    await s.run("two")
    assert rec.names().count("runaway_guard_reminder_injected") == 2


async def test_keys_are_random_per_turn(tmp_path):
    keys = []

    def new_key():
        import secrets

        keys.append(secrets.token_bytes(32))
        return keys[-1]

    rec = Recorder()
    guard = RunawayGuard(on_signal=rec, new_key=new_key)
    _rt, _model, s, _ = make(tmp_path, same(2) + ["done"] + same(2) + ["done"], guard)
    await s.run("one")
    await s.run("two")
    assert len(keys) == 2 and keys[0] != keys[1] and all(len(k) == 32 for k in keys)
    first, second = [e for e in rec.events if e.kind == "repeated_action"]
    assert first.key != second.key  # the same call is not linkable across turns


async def test_events_carry_no_raw_arguments_or_output(tmp_path):
    (tmp_path / "home").mkdir(parents=True)
    ext = create_runaway_guard(HostOptions(tmp_path / "home", {}))
    script = same(4, "bash", command="echo TOP-SECRET-ARG") + ["done"]
    rt, _model, s, _ = make(tmp_path, script, host=ext)
    await s.run("go")
    log = (rt.store.dir(s.id) / EVENTS_FILE).read_text()
    lines = [json.loads(x) for x in log.splitlines()]
    assert {x["event"] for x in lines} == {
        "runaway_guard_signal",
        "runaway_guard_reminder_injected",
        "runaway_guard_turn_summary",
    }
    assert "TOP-SECRET" not in log and "echo" not in log
    summary = lines[-1]
    assert summary["reminded"] == "repeated_action" and summary["reminder_step"] == 3 and summary["steps_judged"] == 5


async def test_verifier_turns_are_observed_but_never_reminded(tmp_path):
    _rt, model, s, rec = make(tmp_path, same(5) + ["done"])
    await s.run("check the goal", source="goal-verifier")
    assert not any(guard_messages(q) for q in model.requests)
    assert "runaway_guard_signal" in rec.names() and "runaway_guard_reminder_injected" not in rec.names()
    summary = rec.events[-1]
    assert summary.name == "runaway_guard_turn_summary" and summary.observe_only and summary.reminded is None


async def test_priority_picks_the_error_family_over_the_repeated_action(tmp_path):
    script = same(4, "read", path="missing.txt") + ["done"]  # same call, same not-found error
    _rt, model, s, rec = make(tmp_path, script)
    await s.run("go")
    [reminder] = [e for e in rec.events if e.name == "runaway_guard_reminder_injected"]
    assert reminder.kind == "same_error_family" and reminder.step == 3
    assert "not found" in guard_messages(model.requests[3])[0].text


async def test_real_greps_that_find_nothing_are_not_errors(tmp_path):
    script = [answer("", tool_call("bash", {"command": f"grep -rn needle{n} ."})) for n in range(5)] + ["done"]
    _rt, _model, s, rec = make(tmp_path, script)
    await s.run("look for it")
    results = [m for m in s.messages if m.role == "tool"]
    assert all(m.tool_results[0].is_error and m.tool_results[0].details["exit_code"] == 1 for m in results)
    assert "runaway_guard_reminder_injected" not in rec.names()
    assert not any(e.kind == "same_error_family" for e in rec.events if e.name == "runaway_guard_signal")


async def test_real_failing_commands_with_varying_arguments_are_one_error_family(tmp_path):
    script = [answer("", tool_call("bash", {"command": f"cat missing{n}.txt"})) for n in range(3)] + ["done"]
    _rt, _model, s, rec = make(tmp_path, script)
    await s.run("read them")
    [reminder] = [e for e in rec.events if e.name == "runaway_guard_reminder_injected"]
    assert reminder.kind == "same_error_family" and reminder.count == 3


# --- configuration -----------------------------------------------------------------------------------------


def test_override_wins_and_the_threshold_never_drops_below_three():
    assert resolve_config({"enabled": False}, None).enabled is False
    assert resolve_config({"enabled": False}, {"enabled": True}).enabled is True
    assert resolve_config({"reminderThreshold": 1}, None).reminder_threshold == 3
    assert resolve_config({"reminderThreshold": 5}, {"reminderThreshold": 2}).reminder_threshold == 3
    assert resolve_config({"reminderThreshold": 4}, {}).reminder_threshold == 4
    assert resolve_config(None, None).enabled is True


async def test_a_higher_threshold_from_local_settings_delays_the_reminder(tmp_path):
    rec = Recorder()
    guard = RunawayGuard(local_config={"reminderThreshold": 4}, on_reminder=rec)
    _rt, _model, s, _ = make(tmp_path, same(5) + ["done"], guard)
    await s.run("go")
    assert [e.step for e in rec.events] == [4]


async def test_local_settings_are_read_once_and_the_override_at_every_judgement(tmp_path):
    home = tmp_path / "home"
    home.mkdir(parents=True)
    (home / "agent.toml").write_text("[runawayGuard]\nenabled = false\n")
    ext = create_runaway_guard(HostOptions(home))
    (home / "agent.toml").write_text("[runawayGuard]\nenabled = true\n")  # too late: read at creation
    override = home / OVERRIDE_FILE

    def flip_on(req):  # the override appears while the turn runs
        override.write_text(json.dumps({"enabled": True}))
        return answer("", tool_call("read", {"path": "a.txt"}))

    script = same(3) + ["done"] + same(2) + [flip_on] + same(2) + ["done"]
    rt, _model, s, _ = make(tmp_path, script, host=ext)
    await s.run("first: disabled by local settings")
    assert not (rt.store.dir(s.id) / EVENTS_FILE).exists()
    await s.run("second: the override turns it on mid-turn")
    lines = [json.loads(x) for x in (rt.store.dir(s.id) / EVENTS_FILE).read_text().splitlines()]
    assert any(x["event"] == "runaway_guard_signal" for x in lines)


def test_a_broken_or_missing_override_leaves_the_local_settings(tmp_path):
    override = tmp_path / OVERRIDE_FILE
    from ctxscope.agent.guard.extension import read_json_file

    guard = RunawayGuard(local_config={"enabled": False}, read_override=lambda: read_json_file(override))
    assert guard.config().enabled is False
    override.write_text("{broken")
    assert guard.config().enabled is False
    override.write_text('{"enabled": true, "reminderThreshold": 7}')
    assert guard.config().enabled is True and guard.config().reminder_threshold == 7


async def test_the_guard_never_blocks_tools_or_ends_the_turn(tmp_path):
    _rt, _model, s, _rec = make(tmp_path, same(12) + ["finally done"])
    r = await s.run("go")
    assert r.ok and r.text == "finally done" and r.steps == 13
    assert all(not t.is_error for m in s.messages if m.role == "tool" for t in m.tool_results)


async def test_a_loop_over_a_200_kib_output_is_reminded_by_its_third_repetition(tmp_path):
    """Against the simulator over real HTTP with the default builtins: the output goes to a new artifact every
    time, so every receipt differs, yet the guard sees the same output and reminds after the third step."""
    from ctxscope.agent.providers.catalog import make_client, resolve
    from ctxscope.agent.providers.retry import RetryPolicy

    from support.sim_fixtures import loop_simulator

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.log").write_text("".join(f"line {n:06d} the same output every time\n" for n in range(5300)))
    assert (ws / "big.log").stat().st_size >= 200 * 1024
    async with loop_simulator() as (state, url):
        state.context_window = 200_000
        steps = [{"tool_calls": [{"name": "bash", "arguments": {"command": "cat big.log"}}]} for _ in range(5)]
        state.set_script(steps + [{"text": "done"}])
        client = make_client(
            resolve("sim", api="anthropic", model="claude-sonnet-4-5", direct=True, base_url=url),
            retry=RetryPolicy(max_retries=0),
        )
        rt = AgentRuntime(client, home=tmp_path / "home", workspace=ws)
        try:
            s = rt.create_session()
            assert (await s.run("look at the log")).ok
        finally:
            await rt.aclose()
        requests = [r for r in state.requests() if r["path"].endswith("/messages")]
    receipts = {
        b["content"] if isinstance(b["content"], str) else json.dumps(b["content"])
        for m in requests[-1]["body"]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert len(receipts) == 5  # five different receipts (each names its own artifact)
    events = [{k.lower(): v for k, v in r["headers"].items()}.get("x-ctxscope-event", "") for r in requests]
    reminded = [i for i, e in enumerate(events) if "guard_reminder;" in e]
    assert reminded == [3]  # the request after the third repetition carries the reminder
    assert "signal=repeated_action; count=3" in events[3] or "signal=no_progress" in events[3]
    assert all("tool_output_externalized" in events[i] for i in range(1, 6))
