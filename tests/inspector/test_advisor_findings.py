"""Findings: each kind found on sessions stored through the real writer, with its evidence."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxscope.inspector.advisor.findings import by_call, findings
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.advisor.model import build_session
from ctxscope.main import cli

from support.factories import T0, analysed, anthropic_request, anthropic_response, make_exchange


def _filler(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _tool(name: str) -> dict:
    return {
        "name": name,
        "description": f"The {name} tool. " + _filler(60, name),
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }


def _session(tmp_path, bodies, responses=None, gaps=10.0):
    exchanges = [
        make_exchange(request=b, response=(responses or {}).get(i), started_at=T0 + i * gaps)
        for i, b in enumerate(bodies)
    ]
    db, _ = analysed(tmp_path / "c.db", exchanges)
    return db


def _by_kind(found, kind):
    return [f for f in found if f.kind == kind]


def test_a_timestamp_in_the_system_prompt_is_named_by_the_pointer_of_the_changing_bytes(tmp_path):
    rules = _filler(1500, "rule")
    bodies, messages = [], []
    for i in range(4):
        messages = [*messages, {"role": "user", "content": f"step {i}: " + _filler(200, f"s{i}x")}]
        system = [
            {"type": "text", "text": "You are a coding agent."},
            {
                "type": "text",
                "text": f"Current time: 2026-12-01T09:4{i}:0{i}Z\n" + rules,
                "cache_control": {"type": "ephemeral"},
            },
        ]
        bodies.append(anthropic_request(list(messages), system=system))
        messages.append({"role": "assistant", "content": f"done {i}"})
    # Each call re-writes its whole prompt to the cache: what the provider reports after each change.
    rewritten = {
        i: anthropic_response(
            usage={
                "input_tokens": 60,
                "cache_creation_input_tokens": 4_000 + 300 * i,
                "cache_read_input_tokens": 0,
                "output_tokens": 5,
            }
        )
        for i in range(4)
    }
    db = _session(tmp_path, bodies, rewritten)
    session = load_session(db, "s1")
    assert session is not None and len(session.calls) == 4
    churn = _by_kind(findings(session), "cache_churn")
    assert len(churn) == 1
    found = churn[0]
    assert found.evidence["pointer"] == "/system/1"
    text = "Current time: 2026-12-01T09:4"
    assert found.evidence["offset"] == len(text)  # the first byte that changes: the minute
    assert "09:40" in found.evidence["before"] and "09:41" in found.evidence["after"]
    # The one loss figure: the tokens and dollars the analysis stored for each breaking call.
    stored = {c.id: (c.lost_tokens, c.lost_usd) for c in session.calls}
    assert found.tokens == sum(stored[c][0] for c in found.calls) > 3 * 2_000
    assert found.usd == pytest.approx(sum(stored[c][1] for c in found.calls), abs=1e-6) and found.usd > 0

    out = CliRunner().invoke(cli, ["findings", "s1", "--db", str(tmp_path / "c.db"), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    churned = [f for f in data["findings"] if f["kind"] == "cache_churn"]
    assert churned[0]["evidence"]["pointer"] == "/system/1"
    assert set(data["by_call"]) >= set(found.calls)
    first = CliRunner().invoke(cli, ["findings", session.calls[0].id, "--db", str(tmp_path / "c.db"), "--json"])
    assert first.exit_code == 0 and json.loads(first.output)["call"] == session.calls[0].id
    assert "cache_churn" not in {f["kind"] for f in json.loads(first.output)["findings"]}  # nothing changed yet
    text_out = CliRunner().invoke(cli, ["findings", "--db", str(tmp_path / "c.db")])  # the latest session
    assert text_out.exit_code == 0 and "cache_churn" in text_out.output and "/system/1" in text_out.output


def test_tools_never_called_are_listed_with_their_token_cost(tmp_path):
    tools = [_tool("read_file"), _tool("write_file"), _tool("web_search")]
    use = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    first = [{"role": "user", "content": "read a.py"}]
    second = [
        *first,
        {"role": "assistant", "content": use["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1"}]},
    ]
    bodies = [
        anthropic_request(first, tools=tools),
        anthropic_request(second, tools=tools),
        anthropic_request(
            [*second, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}], tools=tools
        ),
    ]
    db = _session(tmp_path, bodies, {0: use, 1: anthropic_response("ok")})
    session = load_session(db, "s1")
    assert session is not None
    unused = _by_kind(findings(session), "unused_tools")
    assert len(unused) == 1  # one cause, one finding: the tools are listed in it
    f = unused[0]
    assert f.evidence["tools"] == ["web_search", "write_file"]
    call = session.calls[0]
    for tool in f.evidence["per_tool"]:
        i = next(i for i, s in enumerate(call.prompt.segments) if s.kind == "tools" and s.name == tool["tool"])
        assert tool["pointer"] == f"/tools/{i}"
        assert tool["tokens_per_call"] == call.tokens.per_segment[i] > 60
        assert tool["tokens"] == 3 * call.tokens.per_segment[i]
    assert f.tokens == sum(t["tokens"] for t in f.evidence["per_tool"]) and f.evidence["calls"] == 3
    assert f.usd == round(f.tokens * 3.0 / 1e6, 6)  # claude-sonnet-4-5: $3 per million input tokens
    assert set(f.calls) == {c.id for c in session.calls}

    out = CliRunner().invoke(cli, ["findings", "s1", "--db", str(tmp_path / "c.db")])
    assert out.exit_code == 0 and "write_file" in out.output and "web_search" in out.output
    assert "'read_file'" not in out.output


def _rows(bodies, gaps=10.0, usage=None):
    return [
        {
            "id": f"c{i}",
            "seq": i + 1,
            "started_at": T0 + i * gaps,
            "api": "anthropic.messages",
            "thread": "t",
            "key_fingerprint": "k",
            "usage": (usage or {}).get(i),
            "body": b,
            "response": None,
        }
        for i, b in enumerate(bodies)
    ]


def test_duplicate_content_oversized_results_and_overflow_risk():
    big = _filler(6000, "file")
    read = {"type": "tool_use", "id": "t1", "name": "read", "input": {}}
    history = [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": [read]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big}]},
        {"role": "assistant", "content": "again"},
        {"role": "user", "content": big},
    ]
    bodies = [
        anthropic_request(history),
        anthropic_request([*history, {"role": "assistant", "content": "k"}, {"role": "user", "content": "more"}]),
    ]
    session = build_session("s", _rows(bodies, usage={1: {"input": 190_000}}))
    found = findings(session)
    dup = _by_kind(found, "duplicate_content")
    assert len(dup) == 1 and dup[0].evidence["pointers"] == ["/messages/2/content/0", "/messages/4/content"]
    assert dup[0].calls == ("c0", "c1") and dup[0].tokens == 2 * dup[0].evidence["tokens"]
    big_result = _by_kind(found, "oversized_tool_result")
    assert len(big_result) == 1 and big_result[0].evidence["pointer"] == "/messages/2/content/0"
    assert big_result[0].evidence["more_calls"] == 1
    risk = _by_kind(found, "overflow_risk")
    assert len(risk) == 1 and risk[0].evidence["window"] == 200_000 and risk[0].evidence["calls_left"] is not None
    assert by_call(found)["c1"] and "overflow_risk" in by_call(found)["c1"]


def test_a_breakpoint_whose_writes_expire_unread_never_pays():
    system = [{"type": "text", "text": _filler(2000, "sys")}]
    bodies = [
        anthropic_request(
            [{"role": "user", "content": f"q{i} " + _filler(900, f"u{i}"), "cache_control": {"type": "ephemeral"}}],
            system=system,
        )
        for i in range(3)
    ]
    for b in bodies:  # the marker on the message block, as clients place it
        b["messages"][0]["content"] = [
            {"type": "text", "text": b["messages"][0]["content"], "cache_control": {"type": "ephemeral"}}
        ]
        del b["messages"][0]["cache_control"]
    session = build_session("s", _rows(bodies, gaps=600.0))  # ten minutes apart: every 5m entry expires
    unpaid = _by_kind(findings(session), "unpaid_breakpoint")
    assert len(unpaid) == 1 and unpaid[0].evidence["writes"] == 3 and unpaid[0].usd and unpaid[0].usd > 0
    assert unpaid[0].evidence["pointer"] == "/messages/0/content/0"


def test_a_compaction_is_not_churn_and_reordered_tools_are_named_as_such():
    tools = [_tool("a"), _tool("b"), _tool("c")]
    first = [{"role": "user", "content": "task " + _filler(800, "t")}]
    summary = [{"role": "user", "content": "summary of the work so far " + _filler(300, "sum")}]
    bodies = [
        anthropic_request(first, tools=tools),
        anthropic_request(summary, tools=tools),
        anthropic_request(summary, tools=[tools[1], tools[0], tools[2]]),
    ]
    rows = _rows(bodies)
    rows[1]["has_compaction_before"] = 1
    churn = _by_kind(findings(build_session("s", rows)), "cache_churn")
    assert len(churn) == 1 and churn[0].calls == ("c2",)
    assert churn[0].evidence["reordered"] is True and churn[0].evidence["pointer"] == "/tools/0"
    assert churn[0].summary.startswith("tools reordered at /tools/0")


def test_a_session_without_a_readable_prompt_says_so(tmp_path):
    ex = make_exchange(request={"not": "a prompt"}, started_at=T0)
    analysed(tmp_path / "c.db", [ex])
    found = CliRunner().invoke(cli, ["findings", "s1", "--db", str(tmp_path / "c.db"), "--json"])
    assert found.exit_code == 0 and json.loads(found.output)["skipped"] == 1
    advised = CliRunner().invoke(cli, ["advise", "s1", "--db", str(tmp_path / "c.db")])
    assert advised.exit_code != 0 and "no Anthropic or OpenAI prompt to replay" in advised.output


def test_a_prompt_continued_server_side_is_not_churn():
    bodies = [
        {
            "model": "gpt-5",
            "input": [{"role": "user", "content": f"question {i} " + _filler(50, f"q{i}")}],
            **({"previous_response_id": f"resp_{i}"} if i else {}),
        }
        for i in range(3)
    ]
    rows = [dict(r, api="openai.responses") for r in _rows(bodies)]
    assert _by_kind(findings(build_session("s", rows)), "cache_churn") == []
