"""The transcript API and session titles on a real daemon, fed by the real SDKs in the three wire
formats (Anthropic Messages, OpenAI Chat, OpenAI Responses)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from support.web_fixtures import anthropic_client, openai_client, start_web_daemon

pytestmark = pytest.mark.slow  # (a real daemon each: 4 to 8 s on 2 loaded cores)

REMINDER = "<system-reminder>Today is Thursday.</system-reminder>"


@pytest.fixture
def web(tmp_path):
    d = start_web_daemon(tmp_path)
    yield d
    d.stop()


def _get(web, path):
    try:
        with urllib.request.urlopen(web.url + path, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _transcript(web, session, query=""):
    status, body = _get(web, f"/_ctxscope/api/sessions/{urllib.parse.quote(session, safe='')}/transcript{query}")
    assert status == 200, body
    return body


def _shape(turns):
    return [(t["role"], t["kind"], t.get("tool_name"), t["text"][:30]) for t in turns]


def test_anthropic_transcript_turns_in_order_with_tools_reminders_and_the_answer(web):
    tool = {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": f"{REMINDER}\nFix the bug in io.py\nIt is flaky."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "io.py"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "def f(): pass"}]},
    ]
    client = anthropic_client(web.url, "trans-a")
    client.messages.create(
        model="claude-sonnet-4-5", max_tokens=50, system="Be brief.", tools=[tool], messages=messages
    )
    web.wait_for_calls(1, session="trans-a")
    t = _transcript(web, "trans-a")
    assert (
        t["title"] == "trans-a"
    )  # its label: the name the user gave it and t["session"] == "trans-a" and t["calls"] == 1
    shape = _shape(t["turns"])
    assert shape[:6] == [
        ("system", "system", None, "Be brief."),
        ("user", "reminder", None, REMINDER[:30]),
        ("user", "text", None, "Fix the bug in io.py\nIt is fla"),
        ("assistant", "text", None, "Reading it."),
        ("assistant", "tool_call", "read", '{"path": "io.py"}'),
        ("user", "tool_result", "read", "def f(): pass"),
    ], shape
    assert t["turns"][4]["call_id"] == t["turns"][5]["call_id"] == "toolu_1"
    assert t["turns"][4]["pointer"] == "/messages/1/content/1"
    answer = t["turns"][6:]
    assert answer and all(a["source"] == "response" and a["role"] == "assistant" for a in answer)
    assert answer[0]["pointer"] == "/content/0"
    status, sessions = _get(web, "/_ctxscope/api/sessions")
    assert status == 200 and [s["title"] for s in sessions["sessions"]] == ["trans-a"]
    status, page = _get(web, "/_ctxscope/api/session?s=trans-a")
    assert status == 200 and page["title"] == "trans-a"  # its label: the name the user gave it


def test_openai_chat_and_responses_transcripts(web):
    chat = openai_client(web.url, "trans-chat")
    chat.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "developer", "content": "Answer in English."},
            {"role": "user", "content": "List the files"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "a.py b.py"},
        ],
    )
    responses = openai_client(web.url, "trans-resp")
    responses.responses.create(
        model="gpt-4o",
        instructions="Answer tersely.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Where is main?"}]},
            {"type": "function_call", "call_id": "fc_1", "name": "grep", "arguments": '{"pattern": "main"}'},
            {"type": "function_call_output", "call_id": "fc_1", "output": "app.py:3"},
        ],
    )
    web.wait_for_calls(2)
    t = _transcript(web, "trans-chat")
    assert t["title"] == "trans-chat"  # its label
    assert _shape(t["turns"])[:4] == [
        ("system", "system", None, "Answer in English."),
        ("user", "text", None, "List the files"),
        ("assistant", "tool_call", "ls", '{"path": "."}'),
        ("tool", "tool_result", "ls", "a.py b.py"),
    ]
    assert t["turns"][-1]["source"] == "response" and t["turns"][-1]["pointer"].startswith("/choices/0/message")
    t = _transcript(web, "trans-resp")
    assert _shape(t["turns"])[:4] == [
        ("system", "system", None, "Answer tersely."),
        ("user", "text", None, "Where is main?"),
        ("assistant", "tool_call", "grep", '{"pattern": "main"}'),
        ("tool", "tool_result", "grep", "app.py:3"),
    ], _shape(t["turns"])
    assert t["turns"][-1]["source"] == "response" and t["turns"][-1]["pointer"].startswith("/output/")


def test_transcript_of_an_unknown_session_or_call_is_404(web):
    client = anthropic_client(web.url, "trans-b")
    client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    web.wait_for_calls(1)
    assert _get(web, "/_ctxscope/api/sessions/nope/transcript")[0] == 404
    assert _get(web, "/_ctxscope/api/sessions/trans-b/transcript?at=ffff")[0] == 404
    assert _get(web, "/_ctxscope/api/sessions/trans-b/transcript?at=%00%27")[0] == 404
