"""The cache advisor: alternatives replayed over sessions stored through the real writer."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ctxscope.inspector.advisor.alternatives import advise
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.advisor.model import build_session
from ctxscope.main import cli

from support.factories import T0, analysed, anthropic_request, make_exchange


def _filler(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _agent_bodies(calls: int = 6, *, marker_on: str | None = None) -> list[dict]:
    """A growing conversation behind a long system prompt and tools; breakpoints as ``marker_on`` says."""
    tools = [
        {"name": f"tool{k}", "description": _filler(150, f"t{k}d"), "input_schema": {"type": "object"}}
        for k in range(4)
    ]
    system = [{"type": "text", "text": "You are a coding agent. " + _filler(2500, "rule")}]
    bodies, messages = [], []
    for i in range(calls):
        text = f"step {i} " + _filler(300, f"s{i}")
        messages = [*messages, {"role": "user", "content": [{"type": "text", "text": text}]}]
        body = anthropic_request(
            json.loads(json.dumps(messages)), system=json.loads(json.dumps(system)), tools=json.loads(json.dumps(tools))
        )
        if marker_on == "first_message":  # misplaced: a message that is the same on every call, before the growth
            body["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}
        bodies.append(body)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return bodies


def test_a_session_without_breakpoints_is_advised_placements_that_save(tmp_path):
    exchanges = [make_exchange(request=b, started_at=T0 + 30 * i) for i, b in enumerate(_agent_bodies())]
    db, _ = analysed(tmp_path / "c.db", exchanges)
    session = load_session(db, "s1")
    assert session is not None
    advice = advise(session)
    assert advice is not None and advice.family == "anthropic"
    names = [a.name for a in advice.alternatives]
    assert names == ["as_sent", "static", "moving", "none"]  # no gap over 5 minutes: no 1h alternative
    sent = advice.as_sent.result
    assert sent.cache_read == sent.cache_write == 0 and sent.input == sum(c.tokens.total for c in session.calls)
    assert advice.best.name == "moving" and advice.predicted_saving_pct > 30
    assert advice.best.result.cache_read > 0 and advice.best.result.cost_usd < sent.cost_usd
    assert advice.advice.startswith("add breakpoints at the system prompt, the last message")
    assert "% input cost" in advice.advice

    out = CliRunner().invoke(cli, ["advise", "s1", "--db", str(tmp_path / "c.db"), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["best"] == "moving" and data["advice"] == advice.advice
    assert {"input", "cache_read", "cache_write", "cost_usd", "saving_pct"} <= set(data["alternatives"][0])
    text = CliRunner().invoke(cli, ["advise", "s1", "--db", str(tmp_path / "c.db")])
    assert text.exit_code == 0 and "advice: add breakpoints" in text.output
    missing = CliRunner().invoke(cli, ["advise", "nope", "--db", str(tmp_path / "c.db")])
    assert missing.exit_code != 0 and "no session matches" in missing.output


def _rows(bodies, gaps, api="anthropic.messages"):
    return [
        {
            "id": f"c{i}",
            "seq": i + 1,
            "started_at": T0 + sum(gaps[:i]),
            "api": api,
            "thread": "t",
            "key_fingerprint": "k",
            "usage": None,
            "body": b,
            "response": None,
        }
        for i, b in enumerate(bodies)
    ]


def test_a_misplaced_breakpoint_is_moved_and_long_gaps_call_for_a_1h_ttl():
    bodies = _agent_bodies(5, marker_on="first_message")
    advice = advise(build_session("s", _rows(bodies, [30, 30, 30, 30])))
    assert advice is not None and advice.as_sent.description == "messages[0]"
    assert advice.best.name in ("moving", "static")
    assert advice.advice.startswith("move the breakpoints from messages[0]")

    slow = advise(build_session("s", _rows(_agent_bodies(5), [30, 900, 900, 30])))
    assert slow is not None and "ttl_1h" in [a.name for a in slow.alternatives]
    assert slow.best.name == "ttl_1h" and "(1h)" in slow.best.description


def test_openai_calls_with_a_new_prompt_cache_key_each_time_are_advised_one_key():
    bodies = []
    messages = [{"role": "system", "content": _filler(2000, "sys")}]
    for i in range(4):
        messages = [*messages, {"role": "user", "content": f"q{i}"}]
        bodies.append({"model": "gpt-5", "messages": list(messages), "prompt_cache_key": f"random-{i}"})
        messages.append({"role": "assistant", "content": f"a{i}"})
    advice = advise(build_session("s", _rows(bodies, [20, 20, 20], api="openai.chat")))
    assert advice is not None and advice.family == "openai"
    assert advice.as_sent.result.cache_read == 0 and advice.best.name == "session_key"
    assert advice.best.result.cache_read >= 3 * 1024
    assert advice.advice.startswith("send one prompt_cache_key for the whole session")
