"""Whose call is whose: sessions and threads of clients that send no session id, end to end.

Real openai and anthropic SDKs (each with the user agent of the client it plays) talk to a real
daemon on ONE API key, without labels; the simulator answers. The tests read what the writer
stored, what ``ctxscope sessions --json`` and ``ctxscope session`` print and what the UI's JSON
API answers (docs/architecture.md, "Sessions and threads").
"""

from __future__ import annotations

import copy
import json
import urllib.request

import pytest
from click.testing import CliRunner

from ctxscope.inspector.store.queries import get_call, open_db
from ctxscope.main import cli

from support import sdk_clients
from support.inspector_bodies import claude_code_turns, long_text
from support.web_fixtures import KEY, start_web_daemon

PI_OPENAI = "pi-coding-agent/0.9.1 openai-js/6.26.0"
PI_ANTHROPIC = "pi-coding-agent/0.9.1 anthropic-js/0.60.0"
OPENCODE = "opencode/0.15.2 ai-sdk/anthropic/2.0.1"
CODEX = "codex_cli_rs/0.46.0 (Debian 13; x86_64) xterm"


@pytest.fixture
def web(tmp_path):
    d = start_web_daemon(tmp_path)
    yield d
    stats = d.daemon.writer.stats()
    d.stop()
    assert stats.analysis_failed == 0 and stats.failed == 0, stats.last_error


def _openai(web, user_agent: str | None = None):
    headers = {"User-Agent": user_agent} if user_agent else None
    return sdk_clients.OpenAI(api_key=KEY, base_url=web.url + "/openai/v1", max_retries=0, default_headers=headers)


def _anthropic(web, user_agent: str | None = None):
    headers = {"User-Agent": user_agent} if user_agent else None
    return sdk_clients.Anthropic(api_key=KEY, base_url=web.url + "/anthropic", max_retries=0, default_headers=headers)


def _api(web, path: str):
    with urllib.request.urlopen(web.url + "/_ctxscope/api/" + path, timeout=10) as resp:
        return json.loads(resp.read())


def _rows(web, n: int) -> list[dict]:
    """The n stored calls, analysed, with their full rows (client and grouped_by included)."""
    web.wait_for_calls(n)
    db = open_db(web.db_path)
    try:
        for _ in range(200):
            rows = [get_call(db, r["id"]) for r in web.wait_for_calls(n)]
            if all(r["analysis_version"] for r in rows):
                return rows
            __import__("time").sleep(0.05)
        raise AssertionError("calls were stored but not analysed")
    finally:
        db.close()


def _cli(web, *args: str):
    result = CliRunner().invoke(cli, [*args, "--db", str(web.db_path)])
    assert result.exit_code == 0, result.output
    return result.output


def _chat_script(client, system: str, questions: list[str]) -> None:
    """An SDK script: a conversation of several turns, then a new streaming request."""
    messages = [{"role": "system", "content": system}]
    for q in questions:
        messages.append({"role": "user", "content": q})
        r = client.chat.completions.create(model="gpt-4.1", messages=copy.deepcopy(messages))
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
    stream = client.chat.completions.create(model="gpt-4.1", messages=messages[:2], stream=True)
    for _ in stream:
        pass


def _messages_script(client, system: str, questions: list[str]) -> None:
    messages: list[dict] = []
    for q in questions:
        messages.append({"role": "user", "content": q})
        r = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, system=system, messages=copy.deepcopy(messages)
        )
        messages.append({"role": "assistant", "content": r.content[0].text})
    with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=64, system=system, messages=messages[:1]
    ) as stream:
        for _ in stream:
            pass


def test_clients_on_one_key_without_ids_get_a_session_each(web):
    """The openai and anthropic SDK scripts and pi (both APIs), interleaved on one key, no labels:
    each client's calls form one session and no session holds two user agents. A script's new
    request after a completed answer is not a retry."""
    _chat_script(_openai(web), "You answer arithmetic.", ["What is 2+2?", "And 3+3?"])
    _chat_script(_openai(web, PI_OPENAI), "You are pi, a coding agent.", ["List the files.", "Open main.py."])
    _messages_script(_anthropic(web), "You answer geography.", ["Capital of France?", "And of Spain?"])
    _messages_script(_anthropic(web, PI_ANTHROPIC), "You are pi, a coding agent.", ["Run the tests.", "Fix it."])
    rows = _rows(web, 12)

    by_session: dict[str, set] = {}
    by_client: dict[str, set] = {}
    for r in rows:
        by_session.setdefault(r["session"], set()).add(r["client"])
        by_client.setdefault(r["client"], set()).add(r["session"])
    assert len(by_client) == 4 and all(len(s) == 1 for s in by_client.values()), by_client
    assert len(by_session) == 4 and all(len(c) == 1 for c in by_session.values()), by_session
    for r in rows:
        assert r["grouped_by"] in ("new", "lineage", "client_gap")
        assert r["session_source"] == "key" and r["session"].startswith("key:")
        assert r["attempt"] == 1 and r["retry_of"] is None
        assert "retry" not in [m["kind"] for m in r["markers"] or []], r["id"]
    firsts = [r for r in rows if r["grouped_by"] == "new"]
    assert len(firsts) == 4 and all(r["epoch_reason"] == "session_start" for r in firsts)
    # The UI says the same: one client per session.
    sessions = _api(web, "sessions")["sessions"]
    assert len(sessions) == 4 and all(len(s["clients"]) == 1 for s in sessions)


def _opencode(web) -> tuple[list[str], list[str]]:
    """opencode's shape: a short title call first, the agent loop (tool rounds) next, a summary
    call at the end. Returns the texts of the side calls' first user messages."""
    client = _anthropic(web, OPENCODE)
    task = "Fix the failing test in parser.py"
    client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=32,
        system="You are a title generator. Answer with a title of at most six words.",
        messages=[{"role": "user", "content": f"Generate a title for this conversation:\n{task}"}],
    )
    for body in claude_code_turns(5, first=task, model="claude-sonnet-4-6"):
        client.messages.create(**body)
    client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=64,
        system="Summarise the conversation in one line.",
        messages=[{"role": "user", "content": f"The user asked: {task}. Tests now pass."}],
    )
    return [task]


def test_opencode_main_thread_carries_the_agent_loop(web):
    _opencode(web)
    rows = _rows(web, 7)
    assert len({r["session"] for r in rows}) == 1, [r["session"] for r in rows]
    title, agent, summary = rows[0], rows[1:6], rows[6]
    agent_thread = agent[0]["thread"]
    assert {r["thread"] for r in agent} == {agent_thread} != {title["thread"]}
    assert (title["relation"], title["epoch_reason"], title["grouped_by"]) == ("EPOCH_START", "session_start", "new")
    assert (agent[0]["epoch_reason"], agent[0]["grouped_by"]) == ("thread_start", "client_gap")
    assert [r["grouped_by"] for r in agent[1:]] == ["lineage"] * 4
    assert (summary["epoch_reason"], summary["grouped_by"]) == ("thread_start", "client_gap")

    # ctxscope sessions --json: the agent's thread is the main one, the side calls its children.
    [session] = json.loads(_cli(web, "sessions", "--json"))
    [main] = session["threads"]
    assert (main["thread"], main["main"], main["parent_thread"], main["calls"]) == (agent_thread, True, None, 5)
    assert [(c["thread"], c["parent_thread"], c["main"]) for c in main["children"]] == [
        (title["thread"], agent_thread, False),
        (summary["thread"], agent_thread, False),
    ]
    # Every call says so too (calls --json, show --json): not "the main thread when the thread began".
    listed = {c["id"]: c["parent_thread"] for c in json.loads(_cli(web, "calls", "--json", "--limit", "50"))}
    assert [listed[r["id"]] for r in rows] == [agent_thread] + [None] * 5 + [agent_thread]
    assert json.loads(_cli(web, "show", agent[0]["id"], "--json"))["parent_thread"] is None
    # ctxscope session: the same names, and why each call landed in the session.
    text = _cli(web, "session", session["session"])
    assert "grouped by: lineage 4, client_gap 2, new 1" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.lstrip()[:1].isdigit()}  # SEQ is right-aligned
    assert "side T2" in lines["1"] and "main T1" in lines["2"] and "side T3" in lines["7"]
    # The UI: the sessions page, the session page and the call page agree.
    [overview] = _api(web, "sessions")["sessions"]
    assert [(t["thread"], t["main"], t["index"], t["parent_thread"]) for t in overview["threads"]] == [
        (agent_thread, True, 0, None),
        (title["thread"], False, 1, agent_thread),
        (summary["thread"], False, 2, agent_thread),
    ]
    view = _api(web, "session?s=" + urllib.request.quote(session["session"]))
    assert [(t["thread"], t["main"], t["index"]) for t in view["threads"]] == [
        (agent_thread, True, 0),
        (title["thread"], False, 1),
        (summary["thread"], False, 2),
    ]
    assert view["summary"]["grouped_by"] == {"new": 1, "client_gap": 2, "lineage": 4}
    call = _api(web, "call?id=" + title["id"])["call"]
    assert (call["thread_main"], call["thread_index"], call["parent_thread"], call["grouped_by"]) == (
        False,
        1,
        agent_thread,
        "new",
    )
    assert _api(web, "call?id=" + agent[2]["id"])["call"]["thread_main"] is True


def test_chat_to_responses_in_one_conversation_is_an_api_change(web):
    client = _openai(web)
    system, question = "You are a careful assistant.", "Name three prime numbers."
    r = client.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]
    )
    answer = r.choices[0].message.content
    client.responses.create(
        model="gpt-4.1",
        instructions=system,
        input=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "And three more?"},
        ],
    )
    chat, responses = _rows(web, 2)
    assert (responses["api"], responses["relation"], responses["epoch_reason"]) == (
        "openai.responses",
        "EPOCH_START",
        "api_change",
    )
    assert responses["predecessor"] == chat["id"] and responses["thread"] == chat["thread"]
    assert responses["session"] == chat["session"] and responses["grouped_by"] == "lineage"


def _codex_bodies() -> list[dict]:
    """A Codex-shaped Responses conversation: instructions, two developer messages, the task, two
    tool rounds; then a compaction that keeps the first developer message, drops the second and
    puts a summary after the first input item."""
    instructions = "You are Codex, a coding agent. " + long_text(700, "codex")
    dev_a = {
        "type": "message",
        "role": "developer",
        "content": [
            {
                "type": "input_text",
                "text": "<permissions>Sandbox: workspace-write. Approvals: on-request.</permissions>",
            }
        ],
    }
    dev_b = {
        "type": "message",
        "role": "developer",
        "content": [
            {"type": "input_text", "text": "<environment_context>" + long_text(500, "env") + "</environment_context>"}
        ],
    }
    task = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser bug."}]}
    items = [dev_a, dev_b, task]
    bodies = []
    for i in range(3):
        bodies.append(
            {"model": "gpt-5-codex", "instructions": instructions, "input": copy.deepcopy(items), "store": False}
        )
        items += [
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "shell",
                "arguments": json.dumps({"command": ["cat", f"f{i}.py"]}),
            },
            {"type": "function_call_output", "call_id": f"call_{i}", "output": long_text(150, f"out{i}")},
        ]
    summary = {
        "type": "message",
        "role": "user",
        "content": [
            {
                "type": "input_text",
                "text": "Summary of the conversation so far: the parser drops the last token; f0-f2 were read.",
            }
        ],
    }
    bodies.append(
        {
            "model": "gpt-5-codex",
            "instructions": instructions,
            "store": False,
            "input": [copy.deepcopy(dev_a), summary, {"type": "message", "role": "user", "content": "Go on."}],
        }
    )
    return bodies


def test_codex_compaction_is_diverged_in_the_same_session(web):
    client = _openai(web, CODEX)
    for body in _codex_bodies():
        client.responses.create(**body)
    rows = _rows(web, 4)
    *before, compacted = rows
    assert [r["relation"] for r in before] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert len({r["session"] for r in rows}) == 1 and len({r["thread"] for r in rows}) == 1
    assert (compacted["relation"], compacted["predecessor"], compacted["grouped_by"]) == (
        "DIVERGED",
        before[-1]["id"],
        "lineage",
    )
    assert compacted["has_compaction_before"] is True
    assert "compaction" in [m["kind"] for m in compacted["markers"]]
    # What the previous call had cached beyond the kept prefix is lost, and counted.
    assert before[-1]["usage"]["cache_read"] and compacted["cache_lost_tokens"] > 0, compacted["cache"]
