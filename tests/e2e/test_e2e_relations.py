"""Relations, threads and cache verdicts of real SDK traffic, analysed by the daemon as it stores it.

The real anthropic/openai SDKs talk to the real daemon, which forwards to the simulator; each test
then reads the analysis the writer stored on the call rows.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import pytest

from ctxscope.inspector.store import queries
from ctxscope.inspector.store.analysis_queries import stats
from ctxscope.simulator.control.client import SimulatorControl

from support import sdk_clients
from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    claude_code_turns,
    default_tools,
    long_text,
    make_anthropic_body,
    text,
    user,
)

KEY = "sk-test-relations-0123456789abcdef"
BIG = long_text(1500, "sys")  # ~3000 tokens
MODEL = "claude-sonnet-4-6"  # minimum cacheable prefix 2048 (simulator and analysis agree)


@pytest.fixture(autouse=True)
def _analysis_never_fails(proxy):
    yield
    stats_now = proxy.daemon.writer.stats()
    assert stats_now.analysis_failed == 0 and stats_now.failed == 0, stats_now.last_error


def _anthropic(proxy, **kw) -> anthropic.Anthropic:
    return sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0, **kw)


def _send(client, body: dict, **kw):
    return client.messages.create(**copy.deepcopy(body), **kw)


def big_system(extra: str = "") -> list[dict]:
    return [text("You are a coding agent."), text(BIG + extra, cache_control=dict(EPHEMERAL))]


def _call(proxy, call_id: str) -> dict:
    db = queries.open_db(proxy.db_path)
    try:
        return queries.get_call(db, call_id)
    finally:
        db.conn.close()


def _kinds(row: dict) -> list[str]:
    return [m["kind"] for m in row["markers"] or []]


def test_agent_loop_is_append_only_through_marker_moves_and_restrung_messages(proxy, sim):
    """Claude Code's shape: the last cache marker moves every call and the previous last message is
    re-sent as a plain string; neither is a divergence."""
    client = _anthropic(proxy)
    bodies = claude_code_turns(4, system=big_system(), reminders=(2,), model=MODEL)
    for body in bodies:
        _send(client, body)
    rows = proxy.wait_for_calls(4)
    assert [(r["relation"], r["epoch_reason"]) for r in rows] == [
        ("EPOCH_START", "session_start"),
        ("APPEND_ONLY", None),
        ("APPEND_ONLY", None),
        ("APPEND_ONLY", None),
    ]
    assert {r["thread"] for r in rows} == {rows[0]["id"]}
    assert [r["predecessor"] for r in rows] == [None] + [r["id"] for r in rows[:-1]]
    assert all(r["pointer"] is None for r in rows)
    second = _call(proxy, rows[1]["id"])
    assert second["relation_detail"]["marker_moves"] == ["/messages/0/content"]  # marker dropped, now a string
    assert [r["cache_verdict"] for r in rows] == ["expected_write", "hit", "hit", "hit"]
    assert all(r["usage"]["cache_read"] > 2000 for r in rows[1:])
    assert "reminder" in _kinds(rows[2]) and "reminder" not in _kinds(rows[3])
    assert all("tools_executed" in _kinds(r) for r in rows[1:])
    assert rows[0]["session"] == rows[3]["session"] and rows[0]["session"].startswith("key:")
    assert rows[3]["tokens_estimated"] > rows[0]["tokens_estimated"] > 3000
    assert rows[3]["tokens_by_category"]["system"] > 3000 and rows[3]["tokens_by_category"]["tool_result"] > 0


def test_fork_edits_and_model_switch(proxy, sim):
    # A session id (here a path label): without one, a call going back to an earlier prefix of the
    # thread (step 4 after the fork) would open a thread of its own (docs/architecture.md, "Sessions
    # and threads"), and this test is about the relations inside one thread.
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/forks/anthropic", max_retries=0)
    tools = default_tools()
    u1, a1, u2 = user("Fix the bug in parser.py."), assistant("Looking at it now."), user("Also add a test.")
    edited_tools = copy.deepcopy(tools)
    edited_tools[1]["input_schema"]["properties"]["path"]["description"] = "Absolute file path."
    steps = [
        make_anthropic_body(big_system(), tools, [u1], MODEL),
        make_anthropic_body(big_system(), tools, [u1, a1, u2], MODEL),
        make_anthropic_body(big_system(), tools, [u1, a1, user("Actually, only add a test.")], MODEL),  # fork of 2
        make_anthropic_body(big_system(" Be terse."), tools, [u1, a1, u2], MODEL),  # system edit
        make_anthropic_body(
            big_system(" Be terse."), edited_tools, [u1, a1, u2, assistant("Done."), user("Thanks")], MODEL
        ),
        make_anthropic_body(
            big_system(" Be terse."),
            edited_tools,
            [u1, a1, u2, assistant("Done."), user("Thanks"), assistant("Welcome."), user("Bye")],
            model="claude-opus-4-1",
        ),
    ]
    for body in steps:
        _send(client, body)
    rows = proxy.wait_for_calls(len(steps))
    ids = [r["id"] for r in rows]
    got = [(r["relation"], r["epoch_reason"], r["pointer"], r["predecessor"]) for r in rows]
    assert got == [
        ("EPOCH_START", "session_start", None, None),
        ("APPEND_ONLY", None, None, ids[0]),
        ("DIVERGED", None, "/messages/2/content", ids[1]),
        ("DIVERGED", None, "/system/1/text", ids[1]),
        ("DIVERGED", None, "/tools/1/input_schema/properties/path/description", ids[3]),
        ("EPOCH_START", "model_change", None, ids[4]),
    ]
    assert len({r["thread"] for r in rows}) == 1  # edits keep the conversation's thread
    verdicts = [r["cache_verdict"] for r in rows]
    assert verdicts == ["expected_write", "hit", "hit", "client_break", "client_break", "model_switch"]
    for row, where in zip(
        rows[3:], ("/system/1/text", "/tools/1/input_schema/properties/path/description", "/model"), strict=True
    ):
        assert row["usage"]["cache_read"] == 0 and row["cache"]["break_pointer"] == where
        assert row["cache"]["lost_tokens"] > 2000 and row["cache"]["lost_cost_usd"] > 0
    assert rows[3]["cache"]["before_prev_last_breakpoint"] is True
    s = stats(queries.open_db(proxy.db_path))
    assert s["hit_rate"] == {"hits": 2, "eligible": 4, "rate": 0.5}  # a switched model could read nothing
    assert {(b["cause"], b["area"]) for b in s["breaks"]} == {
        ("client_break", "/system"),
        ("client_break", "/tools"),
        ("model_switch", None),
    }


def test_parallel_side_calls_become_child_threads(proxy, sim):
    """Title generation and a sub-agent, one of them in flight at the same time as the main
    thread's call, get their own threads under the main one and leave its relations intact."""
    client = _anthropic(proxy)
    main = claude_code_turns(3, system=big_system(), model=MODEL)
    title = make_anthropic_body(
        system=[text("Write a 3-word title for this request.")],
        messages=[user("Fix the bug.")],
        model="claude-haiku-4-5",
    )
    agent = make_anthropic_body(
        system=[text("You are a search sub-agent. Find files.")],
        tools=default_tools()[:1],
        messages=[user("Find where the bug is.")],
        model=MODEL,
    )
    _send(client, main[0])
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda b: _send(client, b), [title, main[1]]))
    _send(client, agent)
    _send(client, main[2])
    rows = proxy.wait_for_calls(5)
    by_model = {}
    mains = [r for r in rows if r["model"] == MODEL and r["tokens_estimated"] > 3000]
    assert len(mains) == 3
    assert [m["relation"] for m in mains] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert [m["predecessor"] for m in mains[1:]] == [mains[0]["id"], mains[1]["id"]]
    main_thread = mains[0]["thread"]
    side = [r for r in rows if r not in mains]
    for r in side:
        by_model[r["model"]] = r
        assert r["thread"] == r["id"] != main_thread
        assert r["parent_thread"] == main_thread
        assert (r["relation"], r["epoch_reason"]) == ("EPOCH_START", "thread_start")  # a thread inside a session
    assert set(by_model) == {"claude-haiku-4-5", MODEL}
    [session] = queries.list_sessions(queries.open_db(proxy.db_path))
    [top] = session["threads"]
    assert top["thread"] == main_thread and top["calls"] == 3
    assert sorted(c["thread"] for c in top["children"]) == sorted(r["id"] for r in side)


def test_daemon_restart_resumes_capture(proxy, sim, loop_thread):
    from ctxscope.daemon import start_daemon
    from ctxscope.settings import DaemonConfig

    bodies = claude_code_turns(3, system=big_system(), model=MODEL)
    client = _anthropic(proxy)
    for body in bodies[:2]:
        _send(client, body)
    before = proxy.wait_for_calls(2)
    proxy.stop()  # the writer drains; a new daemon (new analyzer, empty memory) opens the same file
    cfg = DaemonConfig(
        host="127.0.0.1", port=0, db=proxy.db_path, upstreams={"anthropic": sim.url, "openai": sim.url, "sim": sim.url}
    )
    proxy.daemon = loop_thread.call(start_daemon(cfg))
    proxy.url = proxy.daemon.url
    _send(_anthropic(proxy), bodies[2])
    rows = proxy.wait_for_calls(3)
    last = rows[2]
    assert last["capture_epoch"] == before[1]["capture_epoch"] + 1
    assert (last["relation"], last["epoch_reason"]) == ("EPOCH_START", "capture_resumed")
    assert last["predecessor"] == before[1]["id"] and last["thread"] == before[0]["thread"]
    assert last["cache_verdict"] == "hit"  # the provider's cache outlived our restart


def test_explicit_session_ids_and_declared_markers(proxy, sim):
    client = _anthropic(proxy)
    body = make_anthropic_body(system="Short system.", messages=[user("hello")], model=MODEL)
    _send(client, body, extra_headers={"X-Claude-Code-Session-Id": "cc-session-1"})
    _send(client, body, metadata={"user_id": "user_ab12_account_x_session_0f0e0d0c-aaaa-bbbb-cccc-000000000001"})
    longer = make_anthropic_body(
        system="Short system.", messages=[user("hello"), assistant("hi"), user("[summary]")], model=MODEL
    )
    _send(
        client,
        longer,
        extra_headers={
            "X-Claude-Code-Session-Id": "cc-session-1",
            "x-ctxscope-event": "compaction; tokens_before=5000; reason=budget",
        },
    )
    rows = proxy.wait_for_calls(3)
    assert [(r["session"], r["session_source"], r["seq"]) for r in rows] == [
        ("cc-session-1", "header:x-claude-code-session-id", 1),
        ("0f0e0d0c-aaaa-bbbb-cccc-000000000001", "metadata.user_id", 1),
        ("cc-session-1", "header:x-claude-code-session-id", 2),
    ]
    assert rows[2]["predecessor"] == rows[0]["id"] and rows[2]["relation"] == "APPEND_ONLY"
    [declared] = [m for m in rows[2]["markers"] if m["detail"].get("declared")]
    assert declared == {
        "kind": "compaction",
        "pointer": None,
        "detail": {"tokens_before": 5000, "reason": "budget", "declared": True},
    }
    assert rows[2]["has_compaction_before"] is True and rows[0]["has_compaction_before"] is False


def test_responses_previous_response_id_links_the_producer(proxy, sim):
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    first = client.responses.create(model="gpt-sim", input="Remember the number 7.")
    client.responses.create(model="gpt-sim", input="What was it?", previous_response_id=first.id)
    rows = proxy.wait_for_calls(2)
    # compared on the full prompt the provider holds: the first call's input and output, then the new input
    assert rows[1]["relation"] == "APPEND_ONLY" and rows[1]["predecessor"] == rows[0]["id"]
    assert rows[1]["thread"] == rows[0]["thread"]
    assert (rows[1]["session"], rows[1]["session_source"]) == (rows[0]["session"], "previous_response_id")


# --- cache verdicts against the simulator's usage --------------------------------------------


def _loop(proxy, n, system, **kw):
    client = _anthropic(proxy)
    bodies = claude_code_turns(n, system=system, model=MODEL, **kw)
    return client, bodies


def test_verdict_below_minimum_and_not_requested(proxy, sim):
    client = _anthropic(proxy)
    small = [text("Tiny system.", cache_control=dict(EPHEMERAL))]
    _send(
        client,
        make_anthropic_body(small, messages=[user("hi")], model=MODEL),
        extra_headers={"x-ctxscope-session": "small"},
    )
    _send(
        client,
        make_anthropic_body([text(BIG)], messages=[user("hi")], model=MODEL),
        extra_headers={"x-ctxscope-session": "none"},
    )
    rows = {r["session"]: r for r in proxy.wait_for_calls(2)}
    assert rows["small"]["cache_verdict"] == "below_minimum" and rows["small"]["usage"]["cache_write"] == 0
    assert rows["none"]["cache_verdict"] == "not_requested" and rows["none"]["usage"]["cache_read"] == 0


@pytest.mark.parametrize("writer_mode", ["thread"])  # the test moves the in-process analyzer's clock
def test_verdict_ttl_expired_after_an_idle_gap(writer_mode, proxy, sim):
    """Both clocks jump 6 minutes (past the 5-minute TTL): the simulator's cache expires, and the
    analysis sees the same gap between the calls' times."""
    client, bodies = _loop(proxy, 3, big_system())
    _send(client, bodies[0])
    _send(client, bodies[1])
    proxy.wait_for_calls(2)
    analyzer = proxy.daemon.writer.analyzers[0]
    analyzer.clock_offset = 360.0
    sim.state().clock = lambda: time.time() + 360.0
    _send(client, bodies[2])
    rows = proxy.wait_for_calls(3)
    assert [r["cache_verdict"] for r in rows] == ["expected_write", "hit", "ttl_expired"]
    assert rows[2]["usage"]["cache_read"] == 0 and rows[2]["cache"]["lost_tokens"] > 2000
    assert rows[2]["cache"]["gap_seconds"] > 300 and rows[2]["relation"] == "APPEND_ONLY"


def test_verdict_provider_miss_when_the_cache_was_dropped(proxy, sim):
    client, bodies = _loop(proxy, 2, big_system())
    _send(client, bodies[0])
    proxy.wait_for_calls(1)
    SimulatorControl(
        sim.url, sim.state().control_token
    ).reset()  # the provider forgets its cache; the prompt did not change
    _send(client, bodies[1])
    rows = proxy.wait_for_calls(2)
    assert rows[1]["relation"] == "APPEND_ONLY" and rows[1]["usage"]["cache_read"] == 0
    assert rows[1]["cache_verdict"] == "provider_miss" and rows[1]["cache"]["predicted_read"] > 2000


def test_openai_chat_automatic_caching(proxy, sim):
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    messages = [{"role": "system", "content": BIG}, {"role": "user", "content": "first"}]
    client.chat.completions.create(model="gpt-4.1", messages=messages)
    longer = messages + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}]
    client.chat.completions.create(model="gpt-4.1", messages=longer)
    # A system edit keeps the thread because the conversation after it still matches.
    edited = (
        [{"role": "system", "content": "Changed. " + BIG}]
        + longer[1:]
        + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "third"}]
    )
    client.chat.completions.create(model="gpt-4.1", messages=edited)
    rows = proxy.wait_for_calls(3)
    assert [r["relation"] for r in rows] == ["EPOCH_START", "APPEND_ONLY", "DIVERGED"]
    assert rows[2]["pointer"] == "/messages/0/content"
    assert [r["cache_verdict"] for r in rows] == ["expected_write", "hit", "client_break"]
    assert rows[1]["usage"]["cache_read"] >= 1024 and rows[2]["usage"]["cache_read"] == 0
