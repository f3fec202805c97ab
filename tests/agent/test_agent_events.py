"""The nine events and their rules, driven through the real loop with a scripted model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxscope.agent.core.events import (
    Abort,
    Answer,
    AppendMessage,
    Block,
    Effects,
    Event,
    Fail,
    ModifyRequest,
    ReplaceHistory,
    Retry,
    RewriteResult,
    RewriteText,
    Skip,
)
from ctxscope.agent.core.messages import user_message
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.vocab.kinds import MarkerKind


def make_rt(tmp_path, script=(), *handlers, host=(), **kw):
    """handlers: (extension id, event, fn[, appends])"""
    exts = []
    for h in handlers:
        ext_id, event, fn, *rest = h

        def init(api, event=event, fn=fn, rest=rest):
            api.on(event, fn, appends=bool(rest and rest[0]))

        exts.append(Extension(ext_id, init))
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension(), *exts],
        host_builtins=list(host),
        **kw,
    )
    return rt, model, rt.create_session()


def texts(request):
    return [m.text for m in request.messages]


# --- before_llm_call ----------------------------------------------------------------------------


async def test_before_llm_call_exception_aborts_the_call_fail_closed(tmp_path):
    later = []
    _rt, model, s = make_rt(
        tmp_path,
        ["never"],
        ("a", Event.BEFORE_LLM_CALL, lambda c: 1 / 0),
        ("b", Event.BEFORE_LLM_CALL, lambda c: later.append(1)),
    )
    result = await s.run("hi")
    assert result.outcome == "aborted" and "ZeroDivisionError" in result.reason
    assert model.requests == [] and later == []


async def test_append_stops_the_chain(tmp_path):
    seen = []
    hidden = user_message("<system-reminder>cadence</system-reminder>", hidden=True)
    _rt, model, s = make_rt(
        tmp_path,
        ["ok"],
        ("a", Event.BEFORE_LLM_CALL, lambda c: seen.append("a") or AppendMessage(hidden), True),
        ("b", Event.BEFORE_LLM_CALL, lambda c: seen.append("b"), True),
    )
    await s.run("hi")
    assert seen == ["a"]
    assert texts(model.requests[0]) == ["hi", hidden.text]
    assert [m.text for m in s.messages][:2] == ["hi", hidden.text]  # persisted


async def test_request_only_modifiers_run_before_appenders(tmp_path):
    order = []
    hidden = user_message("appended", hidden=True)

    def appender(c):
        order.append("appender")
        return AppendMessage(hidden)

    def modifier(c):
        order.append("modifier")
        return ModifyRequest(
            messages=c.request_messages + (user_message("<system-reminder>deadline 30s</system-reminder>"),)
        )

    # the appender's extension is registered first, yet the modifier runs first
    _rt, model, s = make_rt(
        tmp_path, ["ok"], ("app", Event.BEFORE_LLM_CALL, appender, True), ("mod", Event.BEFORE_LLM_CALL, modifier)
    )
    await s.run("hi")
    assert order == ["modifier", "appender"]
    assert texts(model.requests[0]) == ["hi", "<system-reminder>deadline 30s</system-reminder>", "appended"]
    assert [m.text for m in s.messages] == ["hi", "appended", "ok"]  # the modification was not persisted


async def test_undeclared_append_is_a_contract_error(tmp_path):
    _rt, model, s = make_rt(
        tmp_path, ["x"], ("a", Event.BEFORE_LLM_CALL, lambda c: AppendMessage(user_message("sneaky")))
    )
    result = await s.run("hi")
    assert result.outcome == "aborted" and "appends=True" in result.reason and model.requests == []


async def test_modify_request_is_for_this_request_only(tmp_path):
    def deadline(c):
        return ModifyRequest(messages=c.request_messages + (user_message(f"step {c.step}"),), system="SYS")

    _rt, model, s = make_rt(tmp_path, [answer("", tool_call("ls", {})), "done"], ("d", Event.BEFORE_LLM_CALL, deadline))
    await s.run("hi")
    assert texts(model.requests[0])[-1] == "step 1"
    assert texts(model.requests[1])[-1] == "step 2" and "step 1" not in texts(model.requests[1])
    assert model.requests[0].system == "SYS"
    assert all("step" not in m.text for m in s.messages)


async def test_replace_history_is_persistent_and_a_new_epoch(tmp_path):
    changes = []

    def compact(c):
        if c.step == 2:
            return ReplaceHistory((user_message("summary of earlier work"),), "compaction")

    rt, model, s = make_rt(
        tmp_path,
        [answer("", tool_call("ls", {})), "done"],
        ("c", Event.BEFORE_LLM_CALL, compact),
        ("obs", Event.ON_HISTORY_CHANGED, lambda e: changes.append((e.kind, e.epoch, e.reason))),
    )
    await s.run("hi")
    assert texts(model.requests[1]) == ["summary of earlier work"]
    assert ("replace", 1, "compaction") in changes
    # reload from disk: the live history starts at the replacement, the file keeps everything
    rt.forget_session(s.id)
    again = rt.open_session(s.id)
    assert [m.text for m in again.messages] == ["summary of earlier work", "done"]
    assert again.history.epoch == 1
    records = [json.loads(line) for line in s.file.path.read_text().splitlines()]
    assert sum(r["type"] == "replace" for r in records) == 1


async def test_skip_answer_and_abort(tmp_path):
    _, model, s = make_rt(tmp_path, [], ("s", Event.BEFORE_LLM_CALL, lambda c: Skip("nothing to do")))
    r = await s.run("hi")
    assert (r.outcome, r.reason, model.requests) == ("skipped", "nothing to do", [])

    _, model, s = make_rt(tmp_path / "2", [], ("a", Event.BEFORE_LLM_CALL, lambda c: Answer("cached answer")))
    r = await s.run("hi")
    assert (r.outcome, r.text, model.requests) == ("completed", "cached answer", [])
    assert s.messages[-1].role == "assistant" and s.messages[-1].text == "cached answer"

    _rt, model, s = make_rt(tmp_path / "3", [], ("a", Event.BEFORE_LLM_CALL, lambda c: Abort("budget spent")))
    r = await s.run("hi")
    assert (r.outcome, r.reason, model.requests) == ("aborted", "budget spent", [])


# --- on_llm_call_prepared -----------------------------------------------------------------------


async def test_prepared_view_is_the_final_request_and_read_only(tmp_path):
    seen = []

    def observe(e):
        body = e.call.body_json()
        seen.append((e.call.request.system, body["system"], e.call.headers["x-ctxscope-step"]))
        body["system"] = "tampered"  # a copy: cannot change what is sent

    _rt, model, s = make_rt(
        tmp_path,
        ["ok"],
        ("m", Event.BEFORE_LLM_CALL, lambda c: ModifyRequest(system="FINAL")),
        ("o", Event.ON_LLM_CALL_PREPARED, observe),
    )
    await s.run("hi")
    assert seen == [("FINAL", "FINAL", "1")]
    assert json.loads(model.calls[0].body)["system"] == "FINAL"


async def test_prepared_observer_errors_do_not_stop_the_call(tmp_path):
    _rt, _model, s = make_rt(tmp_path, ["ok"], ("o", Event.ON_LLM_CALL_PREPARED, lambda e: 1 / 0))
    assert (await s.run("hi")).ok and s.errors.counts[Event.ON_LLM_CALL_PREPARED] == 1


# --- after_llm_call -----------------------------------------------------------------------------


async def test_rewrite_text_is_a_pipeline(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path,
        ["draft"],
        ("a", Event.AFTER_LLM_CALL, lambda e: RewriteText(e.response.message.text + " +a")),
        ("b", Event.AFTER_LLM_CALL, lambda e: RewriteText(e.response.message.text + " +b")),
    )
    r = await s.run("hi")
    assert r.text == "draft +a +b" and s.messages[-1].text == "draft +a +b"


async def test_retry_drops_the_rejected_answers_tool_calls_and_asks_again(tmp_path):
    reject_once = []

    def judge(e):
        if not reject_once:
            reject_once.append(1)
            return Retry("Please cite your source and try again.", "missing_citation")

    _rt, model, s = make_rt(
        tmp_path,
        [answer("I'll write it", tool_call("write", {"path": "f.txt", "content": "x"})), "here is the cited answer"],
        ("cite", Event.AFTER_LLM_CALL, judge),
    )
    r = await s.run("hi")
    assert r.ok and r.text == "here is the cited answer"
    assert not (tmp_path / "ws" / "f.txt").exists()  # the rejected tool call had no side effect
    second = model.requests[1]
    assert texts(second) == ["hi", "I'll write it", "Please cite your source and try again."]
    assert not any(m.tool_calls for m in second.messages)
    assert second.messages[-1].meta["kind"] == "retry" and second.messages[-1].meta["hidden"]
    assert "retry" in second.headers["x-ctxscope-event"]


async def test_retry_limit_fails_the_turn(tmp_path):
    _rt, model, s = make_rt(
        tmp_path, ["a", "b", "c", "d", "e"], ("r", Event.AFTER_LLM_CALL, lambda e: Retry("again", "never_good"))
    )
    r = await s.run("hi")
    assert r.outcome == "failed" and r.error_kind == "retry_limit" and len(model.requests) == 4


async def test_fail_ends_the_turn_without_running_tools(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path,
        [answer("hm", tool_call("bash", {"command": "touch ran"}))],
        ("f", Event.AFTER_LLM_CALL, lambda e: Fail("terminal_empty")),
    )
    r = await s.run("hi")
    assert (r.outcome, r.reason) == ("failed", "terminal_empty")
    assert not (tmp_path / "ws" / "ran").exists()
    assert not any(m.tool_calls for m in s.messages)  # no dangling tool call in history


# --- before_tool_call / after_tool_call ---------------------------------------------------------


async def test_block_and_fail_closed_tool_gate(tmp_path):
    def gate(e):
        if e.call.arguments.get("command") == "rm -rf /":
            return Block("destructive command")
        if e.call.name == "write":
            raise RuntimeError("policy store down")

    _rt, _model, s = make_rt(
        tmp_path,
        [
            answer(
                "",
                tool_call("bash", {"command": "rm -rf /"}),
                tool_call("write", {"path": "w.txt", "content": "x"}),
                tool_call("ls", {}),
            ),
            "done",
        ],
        ("g", Event.BEFORE_TOOL_CALL, gate),
    )
    await s.run("hi")
    results = s.messages[2].tool_results
    assert results[0].is_error and "destructive command" in results[0].content
    assert results[1].is_error and "blocked" in results[1].content
    assert not (tmp_path / "ws" / "w.txt").exists()
    assert not results[2].is_error  # ls ran


async def test_after_tool_call_rewrites_field_wise_and_survives_errors(tmp_path):
    _rt, model, s = make_rt(
        tmp_path,
        [answer("", tool_call("ls", {})), "done"],
        ("boom", Event.AFTER_TOOL_CALL, lambda e: 1 / 0),
        ("r", Event.AFTER_TOOL_CALL, lambda e: RewriteResult(details={"receipt": True})),
        ("r2", Event.AFTER_TOOL_CALL, lambda e: RewriteResult(content=e.result.content + "!")),
    )
    await s.run("hi")
    res = s.messages[2].tool_results[0]
    assert res.content.endswith("!") and res.details == {"receipt": True} and not res.is_error
    assert model.requests[1].messages[-1].tool_results[0].content.endswith("!")
    assert s.errors.counts[Event.AFTER_TOOL_CALL] == 1


# --- observers ----------------------------------------------------------------------------------


async def test_history_changed_sees_every_append(tmp_path):
    seen = []
    _rt, _model, s = make_rt(
        tmp_path,
        [answer("", tool_call("ls", {})), "done"],
        ("h", Event.ON_HISTORY_CHANGED, lambda e: seen.append((e.kind, e.messages[0].role))),
    )
    await s.run("hi")
    assert seen == [("append", "user"), ("append", "assistant"), ("append", "tool"), ("append", "assistant")]


async def test_step_end_errors_are_counted_and_the_loop_continues(tmp_path):
    _rt, _model, s = make_rt(
        tmp_path, [answer("", tool_call("ls", {})), "done"], ("bad", Event.ON_STEP_END, lambda e: 1 / 0)
    )
    r = await s.run("hi")
    assert r.ok and r.steps == 2 and s.errors.counts[Event.ON_STEP_END] == 2


async def test_step_end_steering_is_delivered_before_the_next_request(tmp_path):
    def guard(e):
        if e.step == 1:
            e.steer("<system-reminder>do not repeat the same call</system-reminder>", kind="guard", hidden=True)
            e.effects.declare(MarkerKind.GUARD_SIGNAL)

    _rt, model, s = make_rt(tmp_path, [answer("", tool_call("ls", {})), "done"], ("guard", Event.ON_STEP_END, guard))
    await s.run("hi")
    last = model.requests[1].messages[-1]
    assert last.role == "user" and "do not repeat" in last.text and last.meta["kind"] == "guard"
    assert model.requests[1].headers["x-ctxscope-event"] == "guard_signal, steer"
    assert "x-ctxscope-event" not in model.requests[0].headers


async def test_steering_after_a_final_answer_continues_the_turn(tmp_path):
    def once(e):
        if e.step == 1:
            e.steer("also check the README")

    _rt, model, s = make_rt(tmp_path, ["first answer", "second answer"], ("s", Event.ON_STEP_END, once))
    r = await s.run("hi")
    assert r.ok and r.text == "second answer" and r.steps == 2
    assert texts(model.requests[1])[-1] == "also check the README"


async def test_turn_start_and_end_are_called_around_the_turn(tmp_path):
    seen = []
    _rt, _model, s = make_rt(
        tmp_path,
        ["ok"],
        ("t", Event.TURN_START, lambda e: seen.append(("start", e.turn, e.source, e.text))),
        ("t2", Event.TURN_END, lambda e: seen.append(("end", e.turn, e.outcome, e.steps))),
    )
    await s.run("hi", source="cli")
    assert seen == [("start", 1, "cli", "hi"), ("end", 1, "completed", 1)]


async def test_declared_effects_go_on_that_request_only(tmp_path):
    def declare(c):
        if c.step == 1:
            c.effects.declare(MarkerKind.COMPACTION)

    _rt, model, s = make_rt(tmp_path, [answer("", tool_call("ls", {})), "done"], ("c", Event.BEFORE_LLM_CALL, declare))
    await s.run("hi")
    h0, h1 = model.requests[0].headers, model.requests[1].headers
    assert h0["x-ctxscope-event"] == "compaction" and "x-ctxscope-event" not in h1
    assert (h0["x-ctxscope-session"], h0["x-ctxscope-turn"], h0["x-ctxscope-step"]) == (s.id, "1", "1")
    assert h1["x-ctxscope-step"] == "2"


async def test_a_prepared_call_observer_cannot_change_what_is_sent_or_stored(tmp_path):
    """Headers, meta, arguments: each mutation attempt raises at its line; the call and the history keep theirs.
    Logged and ignored by default (production), a failed turn in strict mode (which tests turn on)."""
    from ctxscope.agent.core.loop import LoopConfig
    from ctxscope.agent.core.readonly import ReadOnlyViolation

    attempts = {
        "header": lambda e: e.call.headers.__setitem__("x-added-by-observer", "1"),
        "meta": lambda e: e.call.request.messages[0].meta.__setitem__("kind", "tampered"),
        "request headers": lambda e: e.call.request.headers.update({"x-added-by-observer": "1"}),
        "attribute": lambda e: setattr(e.call, "url", "http://elsewhere"),
        "details": lambda e: e.call.request.tools[0].parameters["properties"].clear(),
    }
    for name, mutate in attempts.items():
        failures = []

        def observer(e, mutate=mutate, failures=failures):
            try:
                mutate(e)
            except Exception as exc:
                failures.append(type(exc).__name__)
                raise

        _rt, model, s = make_rt(
            tmp_path / name, ["ok"], ("o", Event.ON_LLM_CALL_PREPARED, observer), config=LoopConfig(strict_views=False)
        )
        r = await s.run("hi")
        assert r.ok and len(failures) == 1, name
        assert s.errors.counts[Event.ON_LLM_CALL_PREPARED] == 1 and "mutation attempt ignored" in s.errors.recent[-1]
        assert "x-added-by-observer" not in model.calls[0].headers and model.calls[0].url != "http://elsewhere"
        assert (
            s.messages[0].meta["kind"] != "tampered" and model.calls[0].request.messages[0].meta["kind"] != "tampered"
        )
        assert model.calls[0].request.tools[0].parameters["properties"]
    _rt, model, s = make_rt(
        tmp_path / "strict",
        ["ok"],
        ("o", Event.ON_LLM_CALL_PREPARED, attempts["header"]),
        config=LoopConfig(strict_views=True),
    )
    with pytest.raises(ReadOnlyViolation, match="on_llm_call_prepared handler of extension 'o'"):
        await s.run("hi")
    assert model.calls == []  # nothing was sent


def test_strict_mode_is_off_by_default_and_a_test_run_can_turn_it_on(monkeypatch):
    from ctxscope.agent.core.loop import LoopConfig

    monkeypatch.delenv("CTXSCOPE_AGENT_STRICT", raising=False)
    assert LoopConfig().strict_views is False
    monkeypatch.setenv("CTXSCOPE_AGENT_STRICT", "1")
    assert LoopConfig().strict_views is True


async def test_a_prepared_call_observers_header_never_reaches_the_provider(tmp_path):
    """Real HTTP to the simulator through the agent's Anthropic client: by default the header is dropped and the
    turn goes on; in strict mode the turn fails before anything is sent."""
    from ctxscope.agent.core.loop import LoopConfig
    from ctxscope.agent.core.readonly import ReadOnlyViolation
    from ctxscope.agent.providers.catalog import make_client, resolve
    from ctxscope.agent.providers.retry import RetryPolicy

    from support.sim_fixtures import loop_simulator

    def add_header(e):
        e.call.headers["x-observer-was-here"] = "1"

    ws = tmp_path / "ws"
    ws.mkdir()
    async with loop_simulator() as (state, url):
        state.set_script([{"text": "ok"}])
        for strict in (False, True):
            client = make_client(
                resolve("sim", api="anthropic", model="claude-sonnet-4-5", direct=True, base_url=url),
                retry=RetryPolicy(max_retries=0),
            )
            rt = AgentRuntime(
                client,
                home=tmp_path / "home",
                workspace=ws,
                extensions=[
                    core_tools_extension(),
                    Extension("o", lambda api: api.on(Event.ON_LLM_CALL_PREPARED, add_header)),
                ],
                config=LoopConfig(strict_views=strict),
            )
            try:
                s = rt.create_session()
                if strict:
                    with pytest.raises(ReadOnlyViolation):
                        await s.run("hi")
                else:
                    assert (await s.run("hi")).text == "ok" and s.errors.counts[Event.ON_LLM_CALL_PREPARED] == 1
            finally:
                await rt.aclose()
        sent = [r for r in state.requests() if r["path"].endswith("/messages")]
    assert len(sent) == 1 and "x-observer-was-here" not in {k.lower() for k in sent[0]["headers"]}


def test_a_read_only_view_copies_into_ordinary_dicts():
    import copy
    import pickle

    from ctxscope.agent.core.readonly import FrozenDict, ReadOnlyViolation, freeze

    view = freeze({"a": {"b": [1, {"c": 2}]}})
    assert isinstance(view, FrozenDict) and view == {"a": {"b": (1, {"c": 2})}}
    for make in (copy.copy, copy.deepcopy, dict, lambda v: v.copy(), lambda v: pickle.loads(pickle.dumps(v))):
        mine = make(view)
        mine["x"] = 1  # a copy is the caller's own
        assert "x" not in view
    deep = copy.deepcopy(view)
    deep["a"]["b"] = ()
    assert view["a"]["b"] == (1, {"c": 2}) and json.loads(json.dumps(view)) == {"a": {"b": [1, {"c": 2}]}}
    for mutate in (
        lambda: view.update(x=1),
        lambda: view["a"].pop("b"),
        lambda: view.setdefault("y", 2),
        lambda: view.__ior__({"z": 3}),
        lambda: view["a"]["b"][1].clear(),
    ):
        with pytest.raises(ReadOnlyViolation):
            mutate()
    assert view == {"a": {"b": (1, {"c": 2})}}


def test_an_effect_is_declared_by_its_marker_kind_only():
    effects = Effects()
    plain: Any = "compaction; tokens=1"  # what an untyped extension might pass
    with pytest.raises(TypeError):
        effects.declare(plain)
    effects.declare(MarkerKind.CHECKPOINT, rung="hall", validation=None, note="a b;c=d")
    effects.declare(MarkerKind.CHECKPOINT, rung="hall", note="a b;c=d")  # the same effect again: sent once
    effects.declare(MarkerKind.STEER)
    assert effects.take() == ["checkpoint; rung=hall; note=a_b_c_d", "steer"]
