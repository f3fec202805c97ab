"""The conversation API: query, lifecycle, ingress with a queue of inputs, maintenance hook."""

from __future__ import annotations

import asyncio

import pytest

from ctxscope.agent.core.events import Event
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.host.conversation import NotAvailable
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.host.session import SessionBusy
from ctxscope.agent.host.session_store import SessionNotFound
from ctxscope.agent.providers.scripted import ScriptedModel, answer


def make(tmp_path, script):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(model, home=tmp_path / "home", workspace=ws, host_builtins=[])
    return rt, model, rt.conversation


async def test_query_and_lifecycle(tmp_path):
    _rt, _model, conv = make(tmp_path, ["hello back"])
    meta = conv.lifecycle.create("first")
    assert [m.id for m in conv.query.sessions()] == [meta.id] and conv.query.session(meta.id).title == "first"
    result = await conv.ingress.run(meta.id, "hello")
    assert result.ok and [m.text for m in conv.query.messages(meta.id)] == ["hello", "hello back"]
    assert conv.query.turns(meta.id)[0].source == "api"
    assert conv.lifecycle.rename(meta.id, "renamed").title == "renamed"
    conv.lifecycle.delete(meta.id)
    assert conv.query.sessions() == []
    with pytest.raises(SessionNotFound):
        conv.query.messages(meta.id)


async def test_inputs_queue_behind_a_running_turn_and_can_be_edited_cancelled_reordered(tmp_path):
    gate = asyncio.Event()

    async def wait(request):
        await gate.wait()
        return answer("first done")

    _rt, model, conv = make(tmp_path, [wait])
    sid = conv.lifecycle.create().id
    first = conv.ingress.submit(sid, "first")
    await asyncio.sleep(0)
    a = conv.ingress.submit(sid, "a")
    b = conv.ingress.submit(sid, "b")
    c = conv.ingress.submit(sid, "c", source="cron")
    assert [q.text for q in conv.ingress.queued(sid)] == ["a", "b", "c"]
    conv.ingress.edit_queued(sid, a.id, "a (edited)")
    conv.ingress.cancel_queued(sid, b.id)
    conv.ingress.reorder_queued(sid, [c.id, a.id])
    with pytest.raises(ValueError):
        conv.ingress.reorder_queued(sid, [a.id])
    with pytest.raises(SessionBusy):
        conv.lifecycle.delete(sid)
    gate.set()
    assert (await first.result).ok
    assert (await c.result).turn == 2 and (await a.result).turn == 3
    assert b.result.cancelled()
    assert [r.messages[-1].text for r in model.requests] == ["first", "c", "a (edited)"]
    assert [(t.text, t.source) for t in conv.query.turns(sid)] == [
        ("first", "api"),
        ("c", "cron"),
        ("a (edited)", "api"),
    ]


async def test_abort_through_the_api(tmp_path):
    started = asyncio.Event()

    async def hang(request):
        started.set()
        await asyncio.Event().wait()

    _rt, _model, conv = make(tmp_path, [hang, "later"])
    sid = conv.lifecycle.create().id
    running = conv.ingress.submit(sid, "slow")
    queued = conv.ingress.submit(sid, "next")
    await started.wait()
    assert conv.ingress.abort(sid)
    assert (await running.result).outcome == "cancelled"
    assert (await queued.result).ok  # the queue survives an abort


async def test_steer_when_idle_starts_a_turn(tmp_path):
    rt, _model, conv = make(tmp_path, ["ok"])
    sid = conv.lifecycle.create().id
    conv.ingress.steer(sid, "hello")
    await rt.open_session(sid).wait_idle()
    assert [m.text for m in conv.query.messages(sid)] == ["hello", "ok"]


async def test_maintenance_compact_is_a_hook(tmp_path):
    _rt, model, conv = make(tmp_path, [])
    sid = conv.lifecycle.create().id
    assert not conv.maintenance.can_compact
    with pytest.raises(NotAvailable):
        await conv.maintenance.compact(sid)
    seen = []

    async def compactor(ctx, instructions):
        seen.append((ctx.session.id, instructions))
        return "compacted"

    def init(api):
        api.register_command("compact", compactor)

    ws = tmp_path / "ws"
    rt = AgentRuntime(model, home=tmp_path / "home", workspace=ws, host_builtins=[Extension("compactor", init)])
    conv = rt.conversation
    assert conv.maintenance.can_compact
    assert await conv.maintenance.compact(sid, "keep the API notes") == "compacted"
    assert seen == [(sid, "keep the API notes")]


async def test_a_steer_during_the_last_model_call_continues_the_turn(tmp_path):
    gate = asyncio.Event()

    async def last_step(request):
        await gate.wait()
        return answer("final answer")

    _rt, model, conv = make(tmp_path, [last_step, "handled the steer"])
    sid = conv.lifecycle.create().id
    first = conv.ingress.submit(sid, "first")
    while not model.requests:
        await asyncio.sleep(0)
    conv.ingress.steer(sid, "one more thing", source="cli")
    gate.set()
    r = await first.result
    assert r.ok and r.steps == 2 and r.text == "handled the steer"
    assert [m.text for m in conv.query.messages(sid)][-2:] == ["one more thing", "handled the steer"]


async def test_a_steer_that_misses_its_turn_becomes_the_next_input(tmp_path):
    steered = []

    def late(event):  # turn_end runs after the loop's last look at the steering queue
        if not steered:
            steered.append(1)
            rt.open_session(event.session.id).steer("late one", source="cli")

    model = ScriptedModel(["first answer", "late handled"])
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=tmp_path,
        host_builtins=[],
        extensions=[Extension("late", lambda api: api.on(Event.TURN_END, late))],
    )
    s = rt.create_session()
    assert (await s.run("first")).ok
    await s.wait_idle()
    assert [(t.text, t.source) for t in rt.conversation.query.turns(s.id)] == [("first", "api"), ("late one", "cli")]
