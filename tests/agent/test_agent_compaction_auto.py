"""Automatic compaction: request order, triggers, hooks, the provider's overflow, the thrash guard, the inspector."""

from __future__ import annotations

import json

import pytest

from ctxscope.agent.context.compaction.auto import context_management_extension
from ctxscope.agent.context.compaction.events import CompactionHooks, Defer, StopAuto, context_events
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.events import Event
from ctxscope.agent.core.model import ContextOverflowError
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy
from ctxscope.agent.providers.scripted import answer
from ctxscope.inspector.pipeline.analysis_input import parse_event

from support.agent_context_fixtures import BLOB, blob, filler, make_rt, summary, tools_extension

SHOT = {"type": "image", "origin": "computer_use", "data": "..."}
W, OUT = 20_000, 4096
LIMIT = 3616  # the input limit and the trigger line of W/OUT


def observer(ext_id, seen, *, appends=False):
    def init(api):
        api.on(
            Event.BEFORE_LLM_CALL,
            lambda c: seen.append(
                (ext_id, c.step, len(c.history), c.history[0].meta.get("kind"), len(c.request_messages))
            ),
            appends=appends,
        )

    return Extension(ext_id, init)


async def test_before_request_order_hooks_then_pruning_and_compaction_then_reminders(tmp_path):
    seen: list = []
    script = [answer("", blob(f"s{i}", kib=1, images=1)) for i in range(3)] + [
        answer("", blob("big", tokens=22_000)),
        "done",
    ]
    ws = tmp_path / "ws"
    ws.mkdir()
    from support.agent_context_fixtures import RoutedModel

    model = RoutedModel(script, context_window=40_000, max_output_tokens=OUT)  # trigger line 23616
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[tools_extension(BLOB), observer("host-hook", seen)],
        host_builtins=[
            context_management_extension(settings=ContextSettings()),
            observer("reminders", seen, appends=True),
        ],
    )
    s = rt.create_session()
    assert (await s.run("take screenshots")).ok
    # step 4: screenshots 1..3 in history; the request drops the oldest (keep the last 2)
    fourth = model.main_requests[3]
    media = [bool(m.tool_results[0].details.get("media")) for m in fourth.messages if m.role == "tool"]
    assert media == [False, True, True]  # (the history itself keeps all three)
    # step 5 was over the line: the host hook saw the old history, the reminder builtin the compacted one
    step5 = [x for x in seen if x[1] == 5]
    assert step5[0][0] == "host-hook" and step5[0][2] == 9 and step5[0][3] == "input"
    assert step5[1][0] == "reminders" and step5[1][2:] == (1, "compaction_summary", 1)


async def test_serialized_body_over_the_byte_limit_triggers_compaction(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path, [answer("", blob("big", kib=30)), "done"], settings={"byte_limits": {"scripted": 20_000}}
    )
    assert (await s.run("go")).ok
    [ev] = [e for e in context_events(s.view.dir) if e["event"] == "checkpoint"]
    assert ev["trigger"] == "bytes" and ev["tokens_before"] < 96_000  # far under the token line


async def test_provider_overflow_compacts_and_retries_from_the_next_rung(tmp_path):
    _rt, model, s = make_rt(
        tmp_path, [answer("", blob("a", kib=8)), ContextOverflowError("prompt is too long"), "fits now"]
    )
    r = await s.run("go")
    assert r.ok and r.text == "fits now"
    [ev] = [e for e in context_events(s.view.dir) if e["event"] == "checkpoint"]
    assert ev["trigger"] == "overflow" and [a["outcome"] for a in ev["attempts"]][:1] == ["skipped_refused"]
    assert ev["rung"] == "hall" and s.messages[0].meta["kind"] == "compaction_summary"
    assert "checkpoint; rung=hall" in model.main_requests[-1].headers["x-ctxscope-event"]


async def test_pre_compact_hooks_can_defer_or_stop_and_post_hooks_observe(tmp_path):
    verdicts = [Defer("busy"), None]
    posts = []
    hooks = CompactionHooks()
    hooks.on_pre_compact(lambda ev: verdicts.pop(0))
    hooks.on_post_compact(lambda ev: posts.append((ev.trigger, ev.stage, ev.status)))
    _, model, s = make_rt(
        tmp_path,
        [answer("", blob("big", tokens=4000)), answer("", blob("x", kib=1)), "done"],
        window=W,
        hooks=hooks,
        core=False,
    )
    assert (await s.run("go")).ok
    second, third = model.main_requests[1:]
    assert "compaction_deferred; by=hook" in second.headers["x-ctxscope-event"] and len(second.messages) == 3
    assert "checkpoint; rung=hall" in third.headers["x-ctxscope-event"] and posts == [
        ("threshold", "checkpoint", "replaced")
    ]
    stopper = CompactionHooks(pre=[lambda ev: StopAuto("the plugin manages context itself")])
    _rt, model, s = make_rt(
        tmp_path / "b", [answer("", blob("big", tokens=4000)), "done"], window=W, hooks=stopper, core=False
    )
    assert (await s.run("go")).ok and not model.checkpoints
    state = s.view.state.get("compaction")
    assert state["auto"] == "off" and state["reason"] == "the plugin manages context itself"


async def test_an_extension_brings_its_own_hooks_honoured_only_while_enabled(tmp_path):
    from ctxscope.agent.context.compaction.auto import compaction_hook_extension

    seen = []
    ext = compaction_hook_extension(
        "context-keeper", pre=lambda ev: StopAuto("context-keeper manages it"), post=lambda ev: seen.append(ev)
    )
    script = [answer("", blob("big", tokens=4000)), "done", answer("", blob("big2", tokens=4000)), "done"]
    rt, model, off = make_rt(tmp_path, script, window=W, core=False, extensions=[ext])
    off.set_enabled("context-keeper", False)
    assert (await off.run("go")).ok and len(model.checkpoints) == 1 and seen == []  # disabled here: not asked
    on = rt.create_session()
    assert (await on.run("go")).ok and len(model.checkpoints) == 1  # enabled here: it stopped compaction
    assert on.view.state.get("compaction")["reason"] == "context-keeper manages it"
    assert off.view.state.get("compaction")["last"]["status"] == "completed"


async def test_a_broken_hook_does_not_stop_compaction(tmp_path):
    hooks = CompactionHooks(pre=[lambda ev: 1 / 0], post=[lambda ev: 1 / 0])
    _rt, model, s = make_rt(tmp_path, [answer("", blob("big", tokens=4000)), "done"], window=W, hooks=hooks, core=False)
    assert (await s.run("go")).ok and len(model.checkpoints) == 1 and s.history.epoch == 1


def declared(requests, kind):
    return [q for q in requests if f"{kind};" in q.headers.get("x-ctxscope-event", "")]


async def test_no_thrash_loop_when_compaction_cannot_make_room(tmp_path):
    """A system prompt that fills most of the trigger line: the guard stops automatic compaction after the first
    one, and every later request that would not fit the input limit is compacted anyway (the model refuses any
    prompt over it): no step fails."""
    sys_prompt = filler("rules", 3000)
    script = [answer("", blob(f"r{i}", tokens=800)) for i in range(12)] + ["done"]
    _rt, model, s = make_rt(
        tmp_path,
        script,
        window=W,
        core=False,
        system_prompt=sys_prompt,
        settings={"checkpoint_mode": "separate"},
        enforce=LIMIT,
    )
    r = await s.run("work through it")
    assert r.ok and r.steps == 13 and model.refused == []
    state = s.view.state.get("compaction")
    assert state["auto"] == "off" and "less than 20% below the trigger line" in state["reason"]
    guard = [e for e in context_events(s.view.dir) if e["event"] == "compaction_stopped"]
    assert len(guard) == 1 and guard[0]["auto"] == "off"
    assert len(declared(model.main_requests, "compaction_stopped")) == 1
    forced = [e for e in context_events(s.view.dir) if e["event"] == "compaction_forced"]
    assert forced and {(e["why"], e["over"], e["limit"]) for e in forced} == {("auto_off", "input_limit", LIMIT)}
    # one forced compaction per step that would not have fit, each declared on the request that follows it
    assert len(model.checkpoints) == 1 + len(forced) == 1 + len(declared(model.main_requests, "compaction_forced"))


async def test_no_thrash_loop_when_every_turn_refills_the_window(tmp_path):
    script = []
    for turn in range(5):
        script += [answer("", blob(f"t{turn}", tokens=4000)), f"turn {turn} done"]
    _rt, model, s = make_rt(tmp_path, script, window=W, core=False, enforce=LIMIT)
    for turn in range(5):
        assert (await s.run(f"turn {turn}")).ok
    assert model.refused == []
    state = s.view.state.get("compaction")  # the guard still stops line-triggered compaction after the first
    assert state["auto"] == "off" and "would fire again within the next turn" in state["reason"]
    # each later turn's output alone is over the input limit: compacted anyway, once per turn, and marked
    assert len(model.checkpoints) == 5 and len(declared(model.main_requests, "compaction_forced")) == 4
    assert len(declared(model.main_requests, "checkpoint")) == 5


async def test_two_automatic_compactions_and_forced_ones_in_one_session_none_fails(tmp_path):
    """Turns that each push the request over the trigger line, against a model that refuses any prompt over the
    input limit: the first two compactions are line-triggered (the second stops the guard), the later ones are
    forced; no turn fails and the history's epoch counts every replacement."""
    script = []
    for turn in range(6):
        script += [
            answer("", blob(f"a{turn}", tokens=1500)),
            answer("", blob(f"b{turn}", tokens=1500)),
            f"turn {turn} done",
        ]
    _rt, model, s = make_rt(
        tmp_path, script, window=W, core=False, enforce=LIMIT, settings={"checkpoint_mode": "separate"}
    )
    for turn in range(6):
        r = await s.run(f"turn {turn}")
        assert r.ok, (turn, r.outcome, r.reason)
    assert model.refused == []
    events = [e for e in context_events(s.view.dir) if e["event"] in ("checkpoint", "compaction_forced")]
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    assert [e["trigger"] for e in checkpoints][:2] == ["threshold", "threshold"]
    assert {e["trigger"] for e in checkpoints[2:]} == {"limit"} and len(checkpoints) > 2
    assert s.history.epoch == len(checkpoints) == len(model.checkpoints)
    assert s.view.state.get("compaction")["auto"] == "off"


async def test_a_provider_overflow_compacts_even_when_the_guard_stopped_compaction(tmp_path):
    """The provider refuses a prompt the local estimate thought would fit: the overflow path compacts although
    automatic compaction is off, declares it, and the turn goes on."""
    _rt, model, s = make_rt(
        tmp_path, [answer("", blob("a", kib=8)), ContextOverflowError("prompt is too long"), "fits now"]
    )
    from ctxscope.agent.context.compaction.outcome import set_auto

    set_auto(s.view, False, "stopped by the guard earlier", turn=0, step=0)
    r = await s.run("go")
    assert r.ok and r.text == "fits now"
    [ev] = [e for e in context_events(s.view.dir) if e["event"] == "compaction_forced"]
    assert (ev["why"], ev["over"]) == ("auto_off", "provider")
    last = model.main_requests[-1].headers["x-ctxscope-event"]
    assert "compaction_forced; why=auto_off; over=provider" in last and "checkpoint; rung=hall" in last


async def test_the_guard_stops_a_compaction_that_fires_again_the_next_turn(tmp_path):
    from ctxscope.agent.context.compaction.engine import CompactionOutcome
    from ctxscope.agent.core.events import Effects

    from support.agent_context_fixtures import manager_for

    rt, _model, s = make_rt(tmp_path, window=W)
    manager = manager_for(rt)
    line = manager.engine().lines.automatic_trigger_at
    done = CompactionOutcome("threshold", "checkpoint", "replaced", 4000, (), tokens_after=500)
    manager.guard.judge(s.view, done, 1, 1, Effects(), line)
    assert s.view.state.get("compaction")["auto_turns"] == [1] and s.view.state.get("compaction").get("auto") != "off"
    effects = Effects()
    manager.guard.judge(s.view, done, 2, 1, effects, line)  # a big pasted input compacts at step 1 again
    state = s.view.state.get("compaction")
    assert state["auto"] == "off" and state["reason"] == "automatic compaction fired at turn 1 and again at turn 2"
    assert effects.pending == ("compaction_stopped; by=guard; trigger=threshold",)
    archive_plan = CompactionOutcome("archive_plan", "archive", "replaced", 4000, (), tokens_after=3500)
    rt2, _, s2 = make_rt(tmp_path / "b", window=W)
    manager_for(rt2).guard.judge(s2.view, archive_plan, 1, 1, Effects(), line)  # under the line: not judged
    assert s2.view.state.get("compaction") is None


@pytest.mark.slow
async def test_a_long_session_as_the_inspector_sees_it(tmp_path, proxy, sim):
    """Through the real daemon: an externalized output, an archive, a /compact, and what the inspector makes of them."""
    script = [{"tool_calls": [{"name": "blob", "arguments": {"tag": "huge", "kib": 70}}]}]
    script += [{"tool_calls": [{"name": "blob", "arguments": {"tag": f"r{i}", "kib": 16}}]} for i in range(8)]
    script += [{"text": "collected"}, {"match": "<checkpoint-request>", "text": summary()}, {"text": "next"}]
    sim.state().set_script(script)
    client = make_client(
        resolve("sim", proxy=proxy.url, model="gpt-sim", context_window=64_000, max_output_tokens=4096),
        retry=RetryPolicy(max_retries=0),
    )
    rt, _, s = make_rt(
        tmp_path, model=client, settings={"watermark_kib": 64, "min_savings_kib": 24, "keep_recent_rounds": 5}
    )
    try:
        assert (await s.run("collect")).text == "collected"
        assert (await rt.conversation.maintenance.compact(s.id, "keep the row counts")).replaced
        assert (await s.run("and now?")).text == "next"
    finally:
        await rt.aclose()
    n = len([q for q in sim.state().requests() if q["path"].endswith("/chat/completions")])
    rows = proxy.wait_for_calls(n)
    from ctxscope.inspector.store.queries import open_db

    db = open_db(proxy.db_path)
    notes = {r["id"]: json.loads(r["annotations"] or "[]") for r in db.query("select id, annotations from calls")}
    db.conn.close()

    def declared(row):  # each comma-separated effect of the x-ctxscope-event header, parsed as the inspector does
        values = [v for k, v in notes[row["id"]] if k == "x-ctxscope-event"]
        return {m.kind: m.detail for v in values for m in map(parse_event, v.split(", "))}

    kinds = [sorted(declared(r)) for r in rows]
    assert kinds[1] == ["tool_output_externalized"]
    archived = next(i for i, k in enumerate(kinds) if "tool_results_archived" in k)
    arch = declared(rows[archived])["tool_results_archived"]
    assert arch["mode"] == "tool_archive" and arch["archived"] == 2 and arch["saved_bytes"] > 24 * 1024
    assert declared(rows[archived])["compaction"]["trigger"] == "archive_plan"
    assert rows[archived]["has_compaction_before"] and not rows[archived - 1]["has_compaction_before"]
    assert kinds[-2] == ["checkpoint_request"] and declared(rows[-2])["checkpoint_request"]["trigger"] == "manual"
    assert not rows[-2]["has_compaction_before"]  # the checkpoint call itself follows no compaction
    cp = declared(rows[-1])["checkpoint"]
    assert (cp["rung"], cp["validation"], cp["trigger"]) == ("h0", "exact", "manual")
    assert cp["tokens_before"] > cp["tokens_after"] and rows[-1]["has_compaction_before"]

    def marked(row):  # what the inspector itself made of the header
        return {m["kind"] for m in row["markers"] if m.get("detail", {}).get("declared")}

    assert marked(rows[1]) == {"tool_output_externalized"}
    assert marked(rows[archived]) == {"compaction", "tool_results_archived"}
    assert marked(rows[-2]) == {"checkpoint_request"} and marked(rows[-1]) == {"compaction", "checkpoint"}


async def test_consecutive_compacting_turns_against_the_simulator_with_its_window_enforced(tmp_path):
    """Real HTTP to the simulator (32K window, the agent's Anthropic client): every turn's tool output crosses the
    input limit (15,616 tokens), the guard stops line-triggered compaction after the first, and every later turn
    is compacted anyway: no turn fails and the simulator refuses nothing."""
    from support.sim_fixtures import loop_simulator

    window, output, limit = 32_000, 8192, 15_616
    async with loop_simulator() as (state, url):
        state.context_window = window
        client = make_client(
            resolve(
                "sim",
                api="anthropic",
                model="claude-sonnet-4-5",
                direct=True,
                base_url=url,
                context_window=window,
                max_output_tokens=output,
            ),
            retry=RetryPolicy(max_retries=0),
        )
        rt, _, s = make_rt(tmp_path, model=client, core=False, settings={"checkpoint_mode": "separate"})
        try:
            for turn in range(6):
                steps = [{"match": "<checkpoint-request>", "text": summary()} for _ in range(3)]
                steps += [
                    {"tool_calls": [{"name": "blob", "arguments": {"tag": f"t{turn}s{i}", "tokens": 4000}}]}
                    for i in range(4)
                ]
                state.set_script(steps + [{"text": f"turn {turn} done"}])
                r = await s.run(f"turn {turn}")
                assert (r.outcome, r.text) == ("completed", f"turn {turn} done"), (turn, r.reason)
        finally:
            await rt.aclose()
    assert s.view.state.get("compaction")["auto"] == "off"
    events = context_events(s.view.dir)
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    forced = [e for e in events if e["event"] == "compaction_forced"]
    assert {e["turn"] for e in checkpoints} == set(range(1, 7))  # every turn compacted
    assert checkpoints[0]["trigger"] == "threshold" and {e["trigger"] for e in checkpoints[1:]} == {"limit"}
    assert len(forced) == len(checkpoints) - 1 and all(e["limit"] == limit for e in forced)
    usage = [
        r["message"]["meta"]["usage"]
        for r in s.history.file.records()
        if r.get("type") == "message" and r["message"]["meta"].get("usage")
    ]
    # the simulator's own count of every prompt it answered stayed within the input limit
    assert len(usage) == 6 * 5 and max(u["input_tokens"] for u in usage) <= limit
    assert not [e for e in events if e["event"] == "compaction_failed"]


@pytest.mark.slow
async def test_forced_compactions_are_markers_the_inspector_shows(tmp_path, proxy, sim):
    """Through the real daemon: the guard stops automatic compaction, the next turns are compacted anyway, and
    the inspector shows each such request's declared compaction_forced marker next to its checkpoint."""
    window, limit = 32_000, 15_616
    sim.state().context_window = window
    client = make_client(
        resolve("sim", proxy=proxy.url, model="claude-sonnet-4-5", context_window=window, max_output_tokens=8192),
        retry=RetryPolicy(max_retries=0),
    )
    rt, _, s = make_rt(tmp_path, model=client, core=False, settings={"checkpoint_mode": "separate"})
    try:
        for turn in range(3):
            steps = [{"match": "<checkpoint-request>", "text": summary()} for _ in range(3)]
            steps += [
                {"tool_calls": [{"name": "blob", "arguments": {"tag": f"t{turn}s{i}", "tokens": 4000}}]}
                for i in range(4)
            ]
            sim.state().set_script(steps + [{"text": f"turn {turn} done"}])
            assert (await s.run(f"turn {turn}")).text == f"turn {turn} done"
    finally:
        await rt.aclose()
    n = len([q for q in sim.state().requests() if q["path"].endswith(("/messages", "/chat/completions"))])
    assert n > 12
    rows = proxy.wait_for_calls(n)
    marked = [
        {m["kind"]: m.get("detail", {}) for m in r["markers"] if m.get("detail", {}).get("declared")} for r in rows
    ]
    forced = [m for m in marked if "compaction_forced" in m]
    assert len(forced) == 2  # turns 2 and 3; turn 1's compaction was line-triggered and stopped the guard
    for m in forced:
        assert (m["compaction_forced"]["why"], m["compaction_forced"]["over"]) == ("auto_off", "input_limit")
        assert int(m["compaction_forced"]["limit"]) == limit and m["checkpoint"]["trigger"] == "limit"
        assert "compaction" in m  # the has_compaction_before side
    assert sum("compaction_stopped" in m for m in marked) == 1
    assert {r["outcome"] for r in rows} == {"ok"}  # no request was refused on the way
