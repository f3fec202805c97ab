"""The simulator's Gemini wire: generateContent, both streamGenerateContent forms, tool calls, errors."""

from __future__ import annotations

import json

import httpx2
import pytest

MODEL = "gemini-2.5-pro"
BODY = {"contents": [{"role": "user", "parts": [{"text": "one two three four five six seven"}]}]}


@pytest.fixture
def http(sim_alone):
    with httpx2.Client(base_url=sim_alone.base_url) as client:
        yield client


def test_generate_content_names_the_model_from_the_path(http):
    r = http.post(f"/v1beta/models/{MODEL}:generateContent", json=BODY)
    data = r.json()
    assert r.status_code == 200 and data["modelVersion"] == MODEL
    [cand] = data["candidates"]
    assert cand["finishReason"] == "STOP" and cand["content"]["role"] == "model"
    assert cand["content"]["parts"][0]["text"].startswith("sim: one two")
    usage = data["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]


def test_sse_and_json_array_streams_carry_the_same_frames(http):
    sse = http.post(f"/v1beta/models/{MODEL}:streamGenerateContent", params={"alt": "sse"}, json=BODY)
    assert sse.headers["content-type"].startswith("text/event-stream")
    sse_frames = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    arr = http.post(f"/v1beta/models/{MODEL}:streamGenerateContent", json=BODY)
    assert arr.headers["content-type"].startswith("application/json")
    frames = arr.json()
    assert len(frames) == len(sse_frames) > 1
    text = "".join(p["text"] for f in frames for p in f["candidates"][0]["content"]["parts"])
    assert text == "".join(p["text"] for f in sse_frames for p in f["candidates"][0]["content"]["parts"])
    assert "finishReason" in frames[-1]["candidates"][0] and "candidatesTokenCount" in frames[-1]["usageMetadata"]


def test_scripted_tool_call_and_error(sim_alone, http):
    sim_alone.state.set_script(
        [{"tool_calls": [{"name": "read", "arguments": {"path": "a"}}]}, {"error": {"status": 429}}]
    )
    parts = http.post(f"/v1beta/models/{MODEL}:generateContent", json=BODY).json()["candidates"][0]["content"]["parts"]
    assert parts == [{"functionCall": {"name": "read", "args": {"path": "a"}}}]
    r = http.post(f"/v1beta/models/{MODEL}:generateContent", json=BODY)
    assert r.status_code == 429 and r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    bad = http.post(f"/v1beta/models/{MODEL}:generateContent", json={"contents": []})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
    assert http.post(f"/v1beta/models/{MODEL}:countTokens", json=BODY).status_code == 404


def test_implicit_cache_read_is_reported(http):
    body = {"systemInstruction": {"parts": [{"text": "word " * 1500}]}, **BODY}
    first = http.post(f"/v1beta/models/{MODEL}:generateContent", json=body).json()["usageMetadata"]
    second = http.post(f"/v1beta/models/{MODEL}:generateContent", json=body).json()["usageMetadata"]
    assert "cachedContentTokenCount" not in first
    assert 1024 <= second["cachedContentTokenCount"] <= second["promptTokenCount"]


def test_the_simulated_agent_drives_a_gemini_cli_shaped_session_to_a_final_answer(http):
    """Gemini CLI nests its tools in functionDeclarations, sends its context and the task as two
    parts of one user turn, and pairs a functionResponse with its call by name only."""
    tools = [{"functionDeclarations": [{"name": "list_directory"}, {"name": "run_shell_command"}]}]
    task = "list the files in this folder, then run `echo hello` and tell me"
    contents = [{"role": "user", "parts": [{"text": "<session_context>\nsetup\n</session_context>"}, {"text": task}]}]
    url = f"/v1beta/models/{MODEL}:generateContent"
    calls = []
    for _ in range(4):
        parts = http.post(url, json={"contents": contents, "tools": tools}).json()["candidates"][0]["content"]["parts"]
        call = parts[0].get("functionCall")
        if call is None:
            break
        calls.append(call)
        output = "README.md\n" if call["args"]["command"] == "ls" else "hello\n"
        contents += [
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": {"name": call["name"], "response": {"output": output}}}]},
        ]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("run_shell_command", {"command": "ls"}),
        ("run_shell_command", {"command": "echo hello"}),
    ]
    assert "README.md" in parts[0]["text"]
