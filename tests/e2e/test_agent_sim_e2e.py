"""The three provider clients end to end against the provider simulator on loopback (real HTTP, real SSE).

Scripted multi-step turns: tool calls executed (also in parallel), tool errors, steering between
steps, cancellation, resume, retries, context overflow, and a prompt prefix that only grows.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.tools import Tool
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy
from ctxscope.agent.tools.core_tools import core_tools_extension

from support.sim_fixtures import loop_simulator

APIS = ["anthropic", "openai-chat", "openai-responses"]
MODELS = {"anthropic": "claude-sonnet-4-5", "openai-chat": "gpt-4.1", "openai-responses": "gpt-4.1"}
FAST = RetryPolicy(max_retries=4, base_delay=0.001, max_delay=0.01)


@pytest.fixture
async def sim():
    async with loop_simulator() as running:  # a short shutdown grace: a cancelled client leaves a handler behind
        yield running


def agent(tmp_path, sim, api, script=(), extensions=(), system_prompt=None, home="home"):
    state, url = sim
    if script:
        state.set_script(list(script))
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    settings = resolve(
        "sim", api=api, model=MODELS[api], direct=True, base_url=url if api == "anthropic" else url + "/v1"
    )
    rt = AgentRuntime(
        make_client(settings, retry=FAST),
        home=tmp_path / home,
        workspace=ws,
        extensions=[core_tools_extension(), *extensions],
        host_builtins=[],
        system_prompt=system_prompt,
    )
    return rt, ws


def model_requests(state):
    return [r for r in state.requests() if r["path"].endswith(("/messages", "/chat/completions", "/responses"))]


def header(req, name):
    return {k.lower(): v for k, v in req["headers"].items()}.get(name)


def conversation(api, body):
    """The prompt part that grows turn by turn, with cache breakpoints normalised away."""

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(body["input"] if api == "openai-responses" else body["messages"])


def results_in(api, body):
    """(call id, output text, is_error or None) of every tool result in a request body."""
    out = []
    if api == "anthropic":
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else []:
                if b.get("type") == "tool_result":
                    out.append((b["tool_use_id"], b["content"], b.get("is_error", False)))
    elif api == "openai-chat":
        out = [(m["tool_call_id"], m["content"], None) for m in body["messages"] if m["role"] == "tool"]
    else:
        out = [(i["call_id"], i["output"], None) for i in body["input"] if i.get("type") == "function_call_output"]
    return out


@pytest.mark.parametrize("api", APIS)
async def test_multi_step_turn_with_parallel_tools(tmp_path, sim, api):
    rt, ws = agent(
        tmp_path,
        sim,
        api,
        [
            {
                "text": "Looking around.",
                "tool_calls": [{"name": "read", "arguments": {"path": "a.txt"}}, {"name": "ls", "arguments": {}}],
            },
            {"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "made by agent\n"}}]},
            {"thinking": "all good", "text": "Created b.txt."},
        ],
    )
    (ws / "a.txt").write_text("alpha\n")
    s = rt.create_session()
    r = await s.run("make b.txt", source="cli")
    await rt.aclose()
    assert (r.outcome, r.text, r.steps) == ("completed", "Created b.txt.", 3)
    assert (ws / "b.txt").read_text() == "made by agent\n"
    reqs = model_requests(sim[0])
    assert len(reqs) == 3
    assert [
        (header(q, "x-ctxscope-session"), header(q, "x-ctxscope-turn"), header(q, "x-ctxscope-step")) for q in reqs
    ] == [(s.id, "1", "1"), (s.id, "1", "2"), (s.id, "1", "3")]
    outputs = results_in(api, reqs[1]["body"])
    assert "alpha" in outputs[0][1] and "a.txt" in outputs[1][1]
    # APPEND_ONLY within the turn: each request's conversation extends the previous one
    convs = [conversation(api, q["body"]) for q in reqs]
    for a, b in itertools.pairwise(convs):
        assert b[: len(a)] == a
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0


@pytest.mark.parametrize("api", APIS)
async def test_tool_errors_go_back_to_the_model(tmp_path, sim, api):
    rt, _ws = agent(
        tmp_path,
        sim,
        api,
        [
            {
                "tool_calls": [
                    {"name": "read", "arguments": {"path": "missing.txt"}},
                    {"name": "edit", "arguments": "{broken json"},
                ]
            },
            {"text": "Both failed, stopping."},
        ],
    )
    r = await rt.create_session().run("try")
    await rt.aclose()
    assert r.ok
    outputs = results_in(api, model_requests(sim[0])[1]["body"])
    assert "file not found" in outputs[0][1] and "not valid JSON" in outputs[1][1]
    if api == "anthropic":
        assert outputs[0][2] is True and outputs[1][2] is True


@pytest.mark.parametrize("api", APIS)
async def test_steering_between_steps(tmp_path, sim, api):
    started, release = asyncio.Event(), asyncio.Event()

    async def wait(args, ctx):
        started.set()
        await release.wait()
        return "waited"

    ext = Extension("waiter", lambda a: a.register_tool(Tool("wait", "waits", {"type": "object"}, wait)))
    rt, _ws = agent(
        tmp_path, sim, api, [{"tool_calls": [{"name": "wait", "arguments": {}}]}, {"text": "ok"}], extensions=[ext]
    )
    s = rt.create_session()
    pending = s.submit("start")
    await started.wait()
    s.steer("change of plan: stop after this")
    release.set()
    assert (await pending.result).ok
    await rt.aclose()
    second = model_requests(sim[0])[1]
    body = json.dumps(second["body"])
    assert "change of plan: stop after this" in body
    assert header(second, "x-ctxscope-event") == "steer"
    assert results_in(api, second["body"])[0][1] == "waited"


@pytest.mark.parametrize("api", APIS)
async def test_cancellation_mid_request_then_resume_in_a_new_runtime(tmp_path, sim, api):
    rt, _ws = agent(tmp_path, sim, api, [{"text": "too late", "delay_ms": 30_000}])
    s = rt.create_session()
    pending = s.submit("slow one")
    while not model_requests(sim[0]):
        await asyncio.sleep(0.01)
    s.abort()
    assert (await asyncio.wait_for(pending.result, 5)).outcome == "cancelled"
    await rt.aclose()

    # a fresh runtime resumes the session from disk (like `agent run --session ID`)
    rt2, _ = agent(tmp_path, sim, api, [{"tool_calls": [{"name": "ls", "arguments": {}}]}, {"text": "resumed fine"}])
    again = rt2.open_session(s.id)
    r = await again.run("second try")
    await rt2.aclose()
    assert r.ok and r.turn == 2 and r.text == "resumed fine"
    reqs = model_requests(sim[0])
    assert header(reqs[-1], "x-ctxscope-turn") == "2"
    body = json.dumps(reqs[-1]["body"])
    assert "slow one" in body and "second try" in body
    assert [t.outcome for t in rt2.conversation.query.turns(s.id)] == ["cancelled", "completed"]


@pytest.mark.parametrize("api", APIS)
async def test_resume_keeps_the_prompt_prefix(tmp_path, sim, api):
    rt, _ws = agent(tmp_path, sim, api, [{"tool_calls": [{"name": "ls", "arguments": {}}]}, {"text": "first"}])
    s = rt.create_session()
    await s.run("one")
    await rt.aclose()
    rt2, _ = agent(tmp_path, sim, api, [{"text": "second"}])
    await rt2.open_session(s.id).run("two")
    await rt2.aclose()
    reqs = model_requests(sim[0])
    last_of_turn1, first_of_turn2 = conversation(api, reqs[1]["body"]), conversation(api, reqs[2]["body"])
    assert first_of_turn2[: len(last_of_turn1)] == last_of_turn1
    assert reqs[2]["body"].get("system", reqs[2]["body"].get("instructions")) == reqs[1]["body"].get(
        "system", reqs[1]["body"].get("instructions")
    )


@pytest.mark.parametrize("api", APIS)
async def test_retries_on_rate_limit_overload_reset_and_stream_error(tmp_path, sim, api):
    overloaded = (
        {"status": 529, "type": "overloaded_error", "message": "Overloaded"}
        if api == "anthropic"
        else {"status": 503, "type": "server_error", "message": "busy"}
    )
    in_stream = (
        {"type": "overloaded_error", "message": "Overloaded"}
        if api == "anthropic"
        else {"type": "server_error", "code": "server_error", "message": "try again"}
    )
    rt, _ws = agent(
        tmp_path,
        sim,
        api,
        [
            {"error": {"status": 429, "type": "rate_limit_error", "message": "slow down", "retry_after": 0}},
            {"error": overloaded},
            {"text": "cut off", "reset_after_events": 2},
            {"text": "half", "stream_error": in_stream},
            {"text": "finally"},
        ],
    )
    notices = []
    rt.listeners.append(
        lambda e: notices.append(e) if type(e.__dict__.get("delta")).__name__ == "RetryNotice" else None
    )
    r = await rt.create_session().run("hello")
    await rt.aclose()
    assert r.ok and r.text == "finally", r
    reqs = model_requests(sim[0])
    assert [header(q, "x-ctxscope-attempt") for q in reqs] == [None, "2", "3", "4", "5"]
    assert len({json.dumps(q["body"], sort_keys=True) for q in reqs}) == 1  # the same request each time
    assert len(notices) == 4


@pytest.mark.parametrize("api", APIS)
async def test_context_overflow_is_reported_as_such(tmp_path, sim, api):
    rt, _ws = agent(tmp_path, sim, api, [{"text": "never", "context_window": 50}])
    r = await rt.create_session().run("this prompt is far longer than fifty tokens once the tools are counted")
    await rt.aclose()
    assert (r.outcome, r.error_kind) == ("failed", "context_overflow")
    assert len(model_requests(sim[0])) == 1  # not retried


@pytest.mark.parametrize("api", APIS)
async def test_the_second_step_reads_the_first_steps_prompt_from_cache(tmp_path, sim, api):
    big_system = "You follow the house rules.\n" + "\n".join(f"Rule {i}: keep module {i} tidy." for i in range(400))
    rt, _ws = agent(
        tmp_path,
        sim,
        api,
        [{"tool_calls": [{"name": "ls", "arguments": {}}]}, {"text": "done"}],
        system_prompt=big_system,
    )
    s = rt.create_session()
    await s.run("go")
    await rt.aclose()
    first, second = (m.meta["usage"] for m in s.messages if m.role == "assistant")
    assert first["cache_read_tokens"] == 0
    if api == "anthropic":  # the breakpoint on the last message makes the whole first prompt a hit
        assert second["cache_read_tokens"] == first["input_tokens"]
    else:  # automatic prefix caching in 128-token steps
        assert first["input_tokens"] - 128 < second["cache_read_tokens"] <= first["input_tokens"]


async def test_anthropic_thinking_blocks_are_kept_and_replayed_with_their_signature(tmp_path, sim):
    state, url = sim
    state.set_script(
        [{"thinking": "I should list first", "tool_calls": [{"name": "ls", "arguments": {}}]}, {"text": "listed"}]
    )
    settings = resolve(
        "sim", api="anthropic", model="claude-sonnet-4-5", direct=True, base_url=url, thinking_budget=2048
    )
    rt = AgentRuntime(make_client(settings, retry=FAST), home=tmp_path / "home", workspace=tmp_path, host_builtins=[])
    r = await rt.create_session().run("look")
    await rt.aclose()
    assert r.ok
    first, second = model_requests(state)
    assert first["body"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    replayed = second["body"]["messages"][1]["content"][0]
    assert replayed["type"] == "thinking" and replayed["thinking"] == "I should list first" and replayed["signature"]
