"""Findings read from the facts the writer stored: equal to the findings taken from the bodies, read
with no body, taken again once for a store without facts; and without noise (one finding per cause,
counts that match the calls, no unpaid write before its TTL ran out, the most dollars first)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from ctxscope.inspector.advisor.findings import findings
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.reading.stored_findings import stored_findings
from ctxscope.inspector.store import queries
from ctxscope.main import cli

from support import legacy_findings
from support.factories import T0, anthropic_request, anthropic_response, capture, make_exchange

NOW = T0 + 86_400.0  # a day after the sessions: every cache write has expired


def _filler(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _tool(name: str) -> dict:
    return {
        "name": name,
        "description": f"The {name} tool. " + _filler(60, name),
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }


def _tool_use(name: str, n: int) -> dict:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {"path": "a.py"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }


def churn_session(label: str = "churn", t0: float = T0) -> list:
    """Six calls: a timestamp in the system prompt changes on each of the last five, and calls 2
    and 4 also send the tools in another order."""
    tools = [_tool("a"), _tool("b"), _tool("c")]
    rules = _filler(1500, "rule")
    out, messages = [], []
    for i in range(6):
        messages = [*messages, {"role": "user", "content": f"step {i}: " + _filler(200, f"s{i}x")}]
        system = [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": f"Now: 2026-12-01T09:4{i}:00Z\n" + rules, "cache_control": {"type": "ephemeral"}},
        ]
        order = [tools[1], tools[0], tools[2]] if i in (2, 4) else tools
        out.append(
            make_exchange(
                request=anthropic_request(list(messages), system=system, tools=order),
                # as Anthropic reports it: the changed prefix is written again, nothing read
                response=anthropic_response(
                    usage={"input_tokens": 300, "output_tokens": 3, "cache_creation_input_tokens": 1700}
                ),
                started_at=t0 + i * 10.0,
                session_label=label,
            )
        )
        messages.append({"role": "assistant", "content": f"done {i}"})
    return out


def waste_session(label: str = "waste") -> list:
    """Unused tools, a text repeated in one prompt, an oversized tool result kept, and a context
    near the window on its last call."""
    tools = [_tool("read_file"), _tool("write_file"), _tool("web_search"), _tool("grep")]
    repeated = "Project rules. " + _filler(400, "rule")
    big = "output " + _filler(7000, "out")
    m = [{"role": "user", "content": [{"type": "text", "text": repeated}, {"type": "text", "text": "read a.py"}]}]
    bodies = [anthropic_request(list(m), tools=tools)]
    m += [
        {"role": "assistant", "content": _tool_use("read_file", 1)["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": big}]},
    ]
    bodies.append(anthropic_request(list(m), tools=tools))
    m += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": repeated}]
    bodies.append(anthropic_request(list(m), tools=tools))
    m += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "all of it: " + _filler(2000, "z")}]
    bodies.append(anthropic_request(list(m), tools=tools))
    near = anthropic_response("ok", usage={"input_tokens": 185_000, "output_tokens": 3})  # as reported
    responses = {0: _tool_use("read_file", 1), 3: near}
    return [
        make_exchange(
            request=b,
            response=responses.get(i, anthropic_response("ok")),
            started_at=T0 + 1000 + i * 20.0,
            session_label=label,
        )
        for i, b in enumerate(bodies)
    ]


def gaps_session(label: str = "gaps", t0: float = T0 + 5000, gap: float = 600.0, calls: int = 6) -> list:
    """A breakpoint on the first message, calls ``gap`` seconds apart: a 5-minute entry expires unread."""
    system = [{"type": "text", "text": _filler(2000, "sys")}]
    out = []
    for i in range(calls):
        text = f"q{i} " + _filler(900, f"u{i}")
        body = anthropic_request(
            [{"role": "user", "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}],
            system=system,
        )
        out.append(make_exchange(request=body, started_at=t0 + i * gap, session_label=label))
    return out


SESSIONS = ("churn", "waste", "gaps")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The sessions stored through the daemon's writer analyzers, in two writer runs (the second
    starts with nothing in memory, as after a restart)."""
    path = tmp_path_factory.mktemp("stored") / "c.db"
    churn = churn_session()
    capture(path, [*waste_session(), *gaps_session(), *churn[:3]], analyzers=writer_analyzers()).close()
    capture(path, churn[3:], analyzers=writer_analyzers()).close()
    return path


def _dicts(found) -> list[dict]:
    return [f.as_dict() for f in found]


@pytest.mark.slow
@pytest.mark.parametrize("name", SESSIONS)
def test_findings_read_from_stored_facts_equal_the_findings_taken_from_the_bodies(store, name):
    db = queries.open_db(store)
    stored = stored_findings(db, name, now=NOW)
    assert stored is not None and not stored.taken_again  # the writer's facts were all there
    session = load_session(db, name)
    assert session is not None and stored.calls == len(session.calls) and stored.skipped == session.skipped
    assert _dicts(stored.findings) == _dicts(findings(session, now=NOW))
    assert stored.findings  # each fixture session has something to find

    # against the findings as they were computed before, on what did not change in meaning
    old = legacy_findings.findings(session)
    for kind in ("oversized_tool_result", "duplicate_content", "overflow_risk", "unpaid_breakpoint"):
        new = sorted(_dicts(f for f in stored.findings if f.kind == kind), key=json.dumps)
        assert new == sorted(_dicts(f for f in old if f.kind == kind), key=json.dumps), kind
    old_unused = [f for f in old if f.kind == "unused_tools"]
    new_unused = [f for f in stored.findings if f.kind == "unused_tools"]
    assert sorted(f.evidence["tool"] for f in old_unused) == (new_unused[0].evidence["tools"] if new_unused else [])
    assert sum(f.tokens for f in old_unused) == sum(f.tokens for f in new_unused)


@pytest.mark.slow
def test_the_stored_sessions_have_each_kind_the_fixture_plants(store):
    db = queries.open_db(store)
    kinds = {f.kind for name in SESSIONS for f in stored_findings(db, name, now=NOW).findings}
    assert kinds == {
        "unused_tools",
        "oversized_tool_result",
        "duplicate_content",
        "overflow_risk",
        "cache_churn",
        "unpaid_breakpoint",
    }


@pytest.mark.slow
def test_findings_read_no_body(store, tmp_path):
    path = tmp_path / "c.db"
    path.write_bytes(store.read_bytes())
    db = queries.open_db(path)
    before = {name: _dicts(stored_findings(db, name, now=NOW).findings) for name in SESSIONS}
    # every body goes: whatever reads one from now on finds nothing
    db.execute("UPDATE calls SET request_blob = NULL, response_blob = NULL, final_response_blob = NULL")
    db.execute("DELETE FROM blobs")
    db.conn.commit()
    gone = load_session(db, "churn")
    assert gone is not None and gone.calls == () and gone.skipped == 6  # the bodies are really gone
    for name in SESSIONS:
        found = stored_findings(db, name, now=NOW)
        assert found is not None and not found.taken_again and _dicts(found.findings) == before[name]


@pytest.mark.slow
def test_a_store_without_facts_is_taken_from_its_bodies_once(store, tmp_path):
    path = tmp_path / "c.db"
    path.write_bytes(store.read_bytes())
    db = queries.open_db(path)
    before = _dicts(stored_findings(db, "churn", now=NOW).findings)
    db.execute("DELETE FROM call_findings")
    db.conn.commit()
    again = stored_findings(db, "churn", now=NOW)
    assert again is not None and again.taken_again and _dicts(again.findings) == before
    assert db.execute("SELECT count(*) FROM call_findings").fetchone()[0] == 6  # stored for the next read
    once_more = stored_findings(db, "churn", now=NOW)
    assert once_more is not None and not once_more.taken_again and _dicts(once_more.findings) == before


@pytest.mark.slow
def test_a_call_that_reorders_the_tools_and_changes_the_system_prompt_counts_under_both(store):
    found = stored_findings(queries.open_db(store), "churn", now=NOW)
    assert found is not None
    churn = [f for f in found.findings if f.kind == "cache_churn"]
    system = [f for f in churn if f.evidence["pointer"] == "/system/1"]
    reorder = [f for f in churn if f.evidence["reordered"]]
    assert len(system) == 1 and len(reorder) == 1 and len(churn) == 2
    db = queries.open_db(store)
    ids = [r[0] for r in db.execute("SELECT id FROM calls WHERE session = 'churn' ORDER BY seq")]
    assert system[0].calls == tuple(ids[1:])  # changed on the last five calls: five listed
    assert "on 5 call(s)" in system[0].summary
    # sent in another order on calls 2 and 4, so calls 3 and 5 (back to the first order) differ too
    assert reorder[0].calls == tuple(ids[2:6]) and "on 4 call(s)" in reorder[0].summary


@pytest.mark.slow
def test_findings_come_most_dollars_first(store):
    db = queries.open_db(store)
    for name in SESSIONS:
        one = stored_findings(db, name, now=NOW).findings
        assert [f.usd or 0 for f in one] == sorted((f.usd or 0 for f in one), reverse=True)
    # the first message changes only after each 10-minute gap, when the 5-minute cache has expired:
    # the analysis stored no loss for it (the one loss figure), so no churn is found, only the writes
    # nobody read
    gaps = stored_findings(db, "gaps", now=NOW).findings
    assert [f.kind for f in gaps] == ["unpaid_breakpoint"]
    churn = [f for f in stored_findings(db, "churn", now=NOW).findings if f.kind == "cache_churn"]
    assert len(churn) == 2 and churn[0].usd > churn[1].usd > 0


def test_a_write_is_not_unpaid_before_its_ttl_runs_out(tmp_path):
    start = time.time() - 20.0  # the last call was made seconds ago: its write may still be read
    capture(tmp_path / "c.db", gaps_session(t0=start - 2 * 600.0, calls=3), analyzers=writer_analyzers()).close()
    out = CliRunner().invoke(cli, ["findings", "gaps", "--db", str(tmp_path / "c.db"), "--json"])
    assert out.exit_code == 0, out.output
    unpaid = [f for f in json.loads(out.output)["findings"] if f["kind"] == "unpaid_breakpoint"]
    assert len(unpaid) == 1 and unpaid[0]["evidence"]["writes"] == 2  # the first two expired, not the last
    db = queries.open_db(tmp_path / "c.db")
    last = db.execute("SELECT id FROM calls WHERE session = 'gaps' ORDER BY seq DESC LIMIT 1").fetchone()[0]
    assert last not in unpaid[0]["calls"]
    later = stored_findings(db, "gaps", now=time.time() + 301.0)  # once its 5 minutes are over, it is
    assert later is not None
    assert [f.evidence["writes"] for f in later.findings if f.kind == "unpaid_breakpoint"] == [3]
