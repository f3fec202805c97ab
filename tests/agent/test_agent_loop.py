"""The turn loop: multi-step turns, parallel tools, steering, cancellation, limits, provider errors."""

from __future__ import annotations

import asyncio
import itertools

from ctxscope.agent.core import activity as act
from ctxscope.agent.core.loop import LoopConfig
from ctxscope.agent.core.messages import ToolCall, repair_history
from ctxscope.agent.core.model import ContextOverflowError, ProviderError
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.tools import Tool
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.vocab.kinds import MarkerKind

OBJ = {"type": "object", "properties": {"me": {"type": "string"}, "other": {"type": "string"}}}


def tools_ext(*tools):
    def init(api):
        for t in tools:
            api.register_tool(t)

    return Extension("test-tools", init)


def make_rt(tmp_path, script, *tools, listener=None, **kw):
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension(), tools_ext(*tools)],
        host_builtins=[],
        listener=listener,
        **kw,
    )
    return rt, model, rt.create_session()


async def test_multi_step_turn_executes_tools_and_feeds_results_back(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("alpha\nbeta\n")
    _rt, model, s = make_rt(
        tmp_path,
        [
            answer("reading", tool_call("read", {"path": "notes.txt"})),
            answer("", tool_call("edit", {"path": "notes.txt", "old_string": "beta", "new_string": "gamma"})),
            "changed beta to gamma",
        ],
    )
    r = await s.run("rename beta")
    assert (r.outcome, r.steps, r.text) == ("completed", 3, "changed beta to gamma")
    assert (tmp_path / "ws" / "notes.txt").read_text() == "alpha\ngamma\n"
    assert "2\tbeta" in model.requests[1].messages[-1].tool_results[0].content
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # each request extends the previous one: the prompt prefix is stable within a turn
    for a, b in itertools.pairwise(model.requests):
        assert b.messages[: len(a.messages)] == a.messages and b.system == a.system and b.tools == a.tools


async def test_several_tool_calls_run_concurrently_and_results_keep_call_order(tmp_path):
    arrived = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def meet(args, ctx):
        arrived[args["me"]].set()
        await asyncio.wait_for(arrived[args["other"]].wait(), 5)  # sequential execution would time out here
        if args["me"] == "a":
            await asyncio.sleep(0.01)  # a finishes last, but its result still comes first
        return f"{args['me']} met {args['other']}"

    _rt, _model, s = make_rt(
        tmp_path,
        [
            answer("", tool_call("meet", {"me": "a", "other": "b"}), tool_call("meet", {"me": "b", "other": "a"})),
            "done",
        ],
        Tool("meet", "rendezvous", OBJ, meet),
    )
    await s.run("go")
    results = s.messages[2].tool_results
    assert [r.content for r in results] == ["a met b", "b met a"]


async def test_tool_errors_are_results_not_crashes(tmp_path):
    async def explode(args, ctx):
        raise RuntimeError("kaboom")

    broken = ToolCall("c9", "read", {}, "{not json", "arguments are not valid JSON")
    _rt, _model, s = make_rt(
        tmp_path,
        [
            answer(
                "",
                tool_call("nope", {}),
                tool_call("read", {}),
                broken,
                tool_call("explode", {}),
                tool_call("read", {"path": "missing.txt"}),
            ),
            "recovered",
        ],
        Tool("explode", "fails", {"type": "object"}, explode),
    )
    r = await s.run("go")
    assert r.ok and r.text == "recovered"
    contents = [x.content for x in s.messages[2].tool_results]
    assert all(x.is_error for x in s.messages[2].tool_results)
    assert "unknown tool 'nope'" in contents[0]
    assert "missing required argument(s): path" in contents[1]
    assert "not valid JSON" in contents[2]
    assert "kaboom" in contents[3]
    assert "file not found" in contents[4]


async def test_steering_queued_during_a_step_arrives_before_the_next_request(tmp_path):
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(args, ctx):
        started.set()
        await release.wait()
        return "slow done"

    _rt, model, s = make_rt(
        tmp_path,
        [answer("", tool_call("slow", {})), "ok, using python 3"],
        Tool("slow", "waits", {"type": "object"}, slow),
    )
    pending = s.submit("build it", source="cli")
    await started.wait()
    s.steer("use python 3, not 2")
    release.set()
    r = await pending.result
    assert r.ok
    second = model.requests[1]
    assert second.messages[-2].role == "tool" and second.messages[-1].text == "use python 3, not 2"
    assert second.messages[-1].meta["kind"] == "steer" and "steer" in second.headers["x-ctxscope-event"]


async def test_cancel_during_tools_keeps_history_consistent(tmp_path):
    started = asyncio.Event()

    async def hang(args, ctx):
        started.set()
        await asyncio.Event().wait()

    async def quick(args, ctx):
        return "quick result"

    events = []
    rt, model, s = make_rt(
        tmp_path,
        [answer("working", tool_call("quick", {}), tool_call("hang", {})), "next turn ok"],
        Tool("hang", "hangs", {"type": "object"}, hang),
        Tool("quick", "fast", {"type": "object"}, quick),
        listener=events.append,
    )
    pending = s.submit("go")
    await started.wait()
    await asyncio.sleep(0)  # let quick finish
    assert s.abort()
    r = await pending.result
    assert (r.outcome, r.reason) == ("cancelled", "cancelled")
    results = s.messages[-1].tool_results
    assert next(x.content for x in results) == "quick result"
    assert results[1].is_error and "cancelled" in results[1].content
    assert repair_history(s.messages) == list(s.messages)
    assert any(isinstance(e, act.TurnFinished) and e.result.outcome == "cancelled" for e in events)
    # the history on disk is just as consistent, and the session goes on
    rt.forget_session(s.id)
    again = rt.open_session(s.id)
    assert list(again.messages) == list(s.messages)
    r2 = await again.run("continue")
    assert r2.ok and model.requests[-1].messages[2].tool_results[1].is_error
    turns = rt.conversation.query.turns(s.id)
    assert [(t.turn, t.outcome) for t in turns] == [(1, "cancelled"), (2, "completed")]


async def test_cancel_during_the_model_call(tmp_path):
    waiting = asyncio.Event()

    async def stuck(request):
        waiting.set()
        await asyncio.Event().wait()

    _rt, model, s = make_rt(tmp_path, [stuck, "fine now"])
    pending = s.submit("first")
    await waiting.wait()
    s.abort()
    assert (await pending.result).outcome == "cancelled"
    assert [m.role for m in s.messages] == ["user"]
    assert (await s.run("second")).ok
    assert [m.text for m in model.requests[-1].messages] == ["first", "second"]


async def test_cancel_kills_a_running_bash_command(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path, [answer("", tool_call("bash", {"command": "echo started > mark; sleep 30; touch late"}))]
    )
    pending = s.submit("go")
    mark = tmp_path / "ws" / "mark"
    while not mark.exists():
        await asyncio.sleep(0.01)
    s.abort()
    assert (await asyncio.wait_for(pending.result, 10)).outcome == "cancelled"
    assert not (tmp_path / "ws" / "late").exists()


async def test_abort_when_idle_is_a_no_op(tmp_path):
    _rt, _model, s = make_rt(tmp_path, [])
    assert s.abort() is False


async def test_max_steps_stops_a_runaway_turn(tmp_path):
    _rt, model, s = make_rt(
        tmp_path, [answer("", tool_call("ls", {})) for _ in range(10)], config=LoopConfig(max_steps=3)
    )
    r = await s.run("loop forever")
    assert r.outcome == "max_steps" and r.steps == 3 and len(model.requests) == 3
    assert s.messages[-1].role == "tool"


async def test_provider_errors_fail_the_turn_with_their_kind(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path,
        [
            ContextOverflowError("prompt is too long: 300000 tokens"),
            ProviderError("overloaded", status=529, kind="overloaded_error"),
        ],
    )
    r = await s.run("a")
    assert (r.outcome, r.error_kind) == ("failed", "context_overflow")
    r = await s.run("b")
    assert (r.outcome, r.error_kind) == ("failed", "overloaded_error")


async def test_activity_stream_for_displays(tmp_path):
    events = []
    _rt, _model, s = make_rt(tmp_path, [answer("look", tool_call("ls", {})), "done"], listener=events.append)
    await s.run("go", source="cli")
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "TurnStarted",
        "StepStarted",
        "ModelDelta",
        "ToolStarted",
        "ToolFinished",
        "StepStarted",
        "ModelDelta",
        "TurnFinished",
    ]
    assert events[0].source == "cli"


async def test_usage_is_summed_and_kept_on_answers(tmp_path):
    _rt, _model, s = make_rt(tmp_path, [answer("", tool_call("ls", {})), "done"])
    r = await s.run("go")
    assert (r.usage.input_tokens, r.usage.output_tokens) == (20, 10)
    assert s.messages[1].meta["usage"]["input_tokens"] == 10 and s.messages[1].meta["step"] == 1


async def test_overflow_handler_can_shrink_history_and_retry(tmp_path):
    seen = []

    async def compact(ctx):
        seen.append((ctx.attempt, ctx.error.kind, len(ctx.history.messages)))
        ctx.effects.declare(MarkerKind.COMPACTION)
        await ctx.history.replace([ctx.history.messages[-1].with_meta(kind="kept")], "overflow")
        return True

    _rt, model, s = make_rt(
        tmp_path, ["one", ContextOverflowError("prompt is too long"), "fits now"], overflow_handler=compact
    )
    await s.run("first")
    r = await s.run("second")
    assert r.ok and r.text == "fits now" and seen == [(1, "context_overflow", 3)]
    assert [m.text for m in model.last.messages] == ["second"]
    assert model.last.headers["x-ctxscope-event"] == "compaction"


async def test_overflow_recovery_is_bounded_and_can_decline(tmp_path):
    calls = []

    async def useless(ctx):
        calls.append(ctx.attempt)
        return True

    overflow = [ContextOverflowError("prompt is too long") for _ in range(5)]
    _, model, s = make_rt(tmp_path, overflow, overflow_handler=useless, config=LoopConfig(max_overflow_recoveries=2))
    r = await s.run("x")
    assert (r.outcome, r.error_kind, calls, len(model.requests)) == ("failed", "context_overflow", [1, 2], 3)

    async def declines(ctx):
        return False

    _rt, model, s = make_rt(tmp_path / "2", overflow, overflow_handler=declines)
    r = await s.run("x")
    assert r.error_kind == "context_overflow" and len(model.requests) == 1


async def test_abort_right_after_submit_cancels_cleanly_and_the_queue_goes_on(tmp_path):
    rt, _model, s = make_rt(tmp_path, ["second ok"])
    first = s.submit("first")
    second = s.submit("second")
    for _ in range(3):  # let the worker start the first turn's task, but not run it
        if s.busy:
            break
        await asyncio.sleep(0)
    assert s.abort()
    assert (await first.result).outcome == "cancelled"
    assert (await second.result).ok
    assert [(t.turn, t.outcome) for t in rt.conversation.query.turns(s.id)] == [(1, "cancelled"), (2, "completed")]


async def test_calls_sharing_an_id_each_get_their_own_result(tmp_path):
    # some OpenAI-compatible servers send empty or repeated tool-call ids
    _rt, _model, s = make_rt(
        tmp_path,
        [
            answer(
                "",
                ToolCall("call_0", "bash", {"command": "echo one"}),
                ToolCall("call_0", "bash", {"command": "echo two"}),
            ),
            "ok",
        ],
    )
    await s.run("go")
    assert [r.content.splitlines()[0] for r in s.messages[2].tool_results] == ["one", "two"]
