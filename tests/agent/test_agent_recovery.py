"""Empty-answer recovery: retried once after successful tools, then the turn fails terminal_empty."""

from __future__ import annotations

from ctxscope.agent.core.messages import Message, ThinkingBlock
from ctxscope.agent.core.model import STOP, ModelResponse, Usage
from ctxscope.agent.host.builtins import default_extensions
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.recovery.empty_answer import FOLLOW_UP, TERMINAL_EMPTY, terminal_response_recovery_extension
from ctxscope.agent.tools.core_tools import core_tools_extension


def empty(thinking: str = "") -> ModelResponse:
    blocks = (ThinkingBlock(thinking, "sig", source="anthropic"),) if thinking else ()
    return ModelResponse(Message("assistant", blocks), STOP, Usage(5, 0))


def make(tmp_path, script, extensions=None):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = ScriptedModel(script)
    exts = [core_tools_extension(), terminal_response_recovery_extension()] if extensions is None else extensions
    rt = AgentRuntime(model, home=tmp_path / "home", workspace=ws, extensions=exts, host_builtins=[])
    return rt, model, rt.create_session()


LS = answer("", tool_call("ls", {}))


async def test_an_empty_answer_after_successful_tools_is_asked_for_once_more(tmp_path):
    _rt, model, s = make(tmp_path, [LS, empty(), "Listed the folder: it is empty."])
    r = await s.run("what is here?")
    assert r.ok and r.text == "Listed the folder: it is empty."
    retry = model.requests[2]
    assert retry.messages[-1].text == FOLLOW_UP and retry.messages[-1].meta["kind"] == "retry"
    assert "empty_answer_retry; attempt=1" in retry.headers["x-ctxscope-event"]


async def test_a_second_empty_answer_fails_the_turn_terminal_empty(tmp_path):
    _rt, model, s = make(tmp_path, [LS, empty(), empty("thinking only is still empty"), "never asked"])
    r = await s.run("what is here?")
    assert r.outcome == "failed" and r.reason == TERMINAL_EMPTY and r.error_kind == TERMINAL_EMPTY
    assert len(model.requests) == 3


async def test_without_recovery_the_empty_answer_silently_ends_the_turn(tmp_path):
    _rt, _model, s = make(tmp_path, [LS, empty()], extensions=[core_tools_extension()])
    r = await s.run("what is here?")
    assert r.ok and r.text == ""  # what empty-answer recovery exists to prevent


async def test_an_empty_answer_after_a_failed_tool_is_left_alone(tmp_path):
    bad = answer("", tool_call("read", {"path": "missing.txt"}))
    _rt, model, s = make(tmp_path, [bad, empty()])
    r = await s.run("read it")
    assert r.ok and len(model.requests) == 2


async def test_an_empty_first_answer_is_left_alone(tmp_path):
    _rt, model, s = make(tmp_path, [empty()])
    r = await s.run("hi")
    assert r.ok and len(model.requests) == 1


async def test_after_a_good_answer_the_next_tools_get_their_own_retry(tmp_path):
    _rt, model, s = make(tmp_path, [LS, empty(), LS, empty(), "fine"])
    r = await s.run("go")
    assert r.ok and r.text == "fine" and len(model.requests) == 5


async def test_mounted_by_default(tmp_path):
    assert "terminal-response-recovery" in [e.id for e in default_extensions()]
    _rt, _model, s = make(tmp_path, [LS, empty(), empty()], extensions=default_extensions())
    r = await s.run("go")
    assert r.reason == TERMINAL_EMPTY
