"""The simulator's HTTP surface: control endpoints, routes, raw SSE framing, layering."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import aiohttp
import pytest

from ctxscope.simulator.app import STATE_KEY, SimulatorState, create_app, start_simulator
from ctxscope.vocab.tokens import count_tokens

SECRET = "sk-ant-very-secret-value"


@pytest.fixture
async def sim():
    runner, base_url = await start_simulator(script=[{"text": "from the initial script"}])
    state = runner.app[STATE_KEY]
    async with aiohttp.ClientSession(base_url, headers={"X-Sim-Token": state.control_token}) as session:
        yield session, state
    await runner.cleanup()


def anthropic_body(text="hello", **kw):
    return {"model": "claude-sim", "max_tokens": 64, "messages": [{"role": "user", "content": text}], **kw}


async def test_start_simulator_serves_initial_script_and_logs_redacted_requests(sim):
    session, state = sim
    assert isinstance(state, SimulatorState)
    headers = {"x-api-key": SECRET, "anthropic-version": "2023-06-01", "authorization": f"Bearer {SECRET}"}
    async with session.post("/v1/messages", json=anthropic_body("hi"), headers=headers) as resp:
        assert resp.status == 200 and resp.headers["request-id"].startswith("req_01")
        assert (await resp.json())["content"][0]["text"] == "from the initial script"
    async with session.get("/_sim/requests") as resp:
        text = await resp.text()
    assert SECRET not in text
    [entry] = json.loads(text)
    assert (entry["method"], entry["path"], entry["body"]["messages"][0]["content"]) == ("POST", "/v1/messages", "hi")
    assert entry["headers"]["x-api-key"] == entry["headers"]["Authorization"] == "<redacted>"
    assert entry["headers"]["anthropic-version"] == "2023-06-01" and len(entry["key_fingerprint"]) == 12


async def test_script_control_endpoints(sim):
    session, state = sim
    async with session.post("/_sim/script", json=[{"text": "a"}, {"text": "b"}]) as resp:
        assert (await resp.json()) == {"queued": 2}
    async with session.post("/_sim/script", json={"append": [{"empty": True}]}) as resp:
        assert (await resp.json()) == {"queued": 3}
    async with session.post("/_sim/script", json=[{"text": "ok"}, {"bogus": 1}]) as resp:
        assert resp.status == 400 and "step 1" in (await resp.json())["error"]
    async with session.get("/_sim/script") as resp:
        assert (await resp.json()) == [{"text": "a"}, {"text": "b"}, {"empty": True}]  # a bad script changes nothing
    state.append_script([{"text": "pushed in process"}])
    assert [s["text"] for s in state.pending()[:2]] == ["a", "b"] and len(state.pending()) == 4


async def test_reset_clears_queue_log_and_cache(sim):
    session, state = sim
    body = anthropic_body(" ".join(["hello"] * 1100), cache_control={"type": "ephemeral"})
    async with session.post("/v1/messages", json=body) as resp:
        assert (await resp.json())["usage"]["cache_creation_input_tokens"] == 1100
    assert len(state.cache) > 0 and state.requests()
    async with session.post("/_sim/reset", json={}) as resp:
        assert resp.status == 200
    assert (state.pending(), state.requests(), len(state.cache)) == ([], [], 0)
    async with session.post("/v1/messages", json=body) as resp:
        assert (await resp.json())["usage"]["cache_read_input_tokens"] == 0


async def test_config_endpoint(sim):
    session, state = sim
    async with session.post("/_sim/config", json={"context_window": 3}) as resp:
        assert (await resp.json()) == {"context_window": 3}
    async with session.post(
        "/chat/completions", json={"model": "gpt-x", "messages": [{"role": "user", "content": "one two three four"}]}
    ) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "context_length_exceeded"
    async with session.post("/_sim/config", json={"context_window": -1}) as resp:
        assert resp.status == 400
    assert state.context_window == 3


async def test_config_plays_a_third_party_endpoint_only_when_told_exactly(sim):
    session, state = sim
    for bad in ("false", 0, None, [False]):
        async with session.post("/_sim/config", json={"provider_itself": bad}) as resp:
            assert resp.status == 400 and "provider_itself" in (await resp.text())
    assert state.provider_itself is True
    async with session.post("/_sim/config", json={"provider_itself": False}) as resp:
        assert (await resp.json())["provider_itself"] is False
    async with session.post("/_sim/config", json={"provider_itself": True}) as resp:
        assert "provider_itself" not in await resp.json() and state.provider_itself is True


async def test_models_in_both_shapes_with_and_without_prefix(sim):
    session, _ = sim
    async with session.get("/v1/models") as resp:
        listing = await resp.json()
    assert listing["object"] == "list" and all(m["object"] == "model" for m in listing["data"])
    async with session.get("/models", headers={"anthropic-version": "2023-06-01"}) as resp:
        listing = await resp.json()
    assert listing["has_more"] is False and all(m["type"] == "model" for m in listing["data"])
    async with session.get("/v1/models/gpt-custom") as resp:
        assert (await resp.json())["id"] == "gpt-custom"


async def test_bad_requests_answer_in_provider_shape(sim):
    session, _ = sim
    async with session.post("/v1/messages", data=b"{not json") as resp:
        body = await resp.json()
        assert resp.status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    async with session.post("/v1/responses", json={"input": "no model"}) as resp:
        body = await resp.json()
        assert resp.status == 400 and body["error"]["param"] == "model"


async def test_match_steps_wait_for_their_request(sim):
    session, state = sim
    state.set_script([{"text": "for beta", "match": "beta"}, {"text": "for anyone"}])
    replies = []
    for text in ("alpha", "beta", "gamma"):
        async with session.post("/v1/messages", json=anthropic_body(text)) as resp:
            replies.append((await resp.json())["content"][0]["text"])
    assert replies == ["for anyone", "for beta", "sim: gamma"]


async def _http_chunks(resp: aiohttp.ClientResponse) -> list[bytes]:
    chunks, current = [], b""
    async for data, end in resp.content.iter_chunks():
        current += data
        if end:
            chunks.append(current)
            current = b""
    if current:
        chunks.append(current)
    return chunks


async def test_anthropic_sse_frames_one_per_http_chunk(sim):
    session, state = sim
    state.set_script([{"text": "alpha beta gamma delta epsilon zeta eta theta"}])
    async with session.post("/v1/messages", json=anthropic_body(stream=True)) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        chunks = await _http_chunks(resp)
    frames = [c.decode() for c in chunks]
    assert all(f.startswith("event: ") and f.endswith("\n\n") and f.count("\n\n") == 1 for f in frames)
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert names.count("content_block_delta") == 3
    for frame, name in zip(frames, names, strict=True):
        assert json.loads(frame.split("data: ", 1)[1])["type"] == name
    delta = json.loads(frames[-2].split("data: ", 1)[1])
    assert delta["usage"]["output_tokens"] == count_tokens("alpha beta gamma delta epsilon zeta eta theta")
    assert delta["usage"]["input_tokens"] == 1


async def test_chat_and_responses_framing(sim):
    session, state = sim
    state.set_script([{"text": "one two three"}, {"text": "one two three"}])
    chat = {"model": "gpt-x", "messages": [{"role": "user", "content": "x"}], "stream": True}
    async with session.post("/v1/chat/completions", json=chat) as resp:
        frames = [c.decode() for c in await _http_chunks(resp)]
    assert all(f.startswith("data: ") for f in frames) and frames[-1] == "data: [DONE]\n\n"
    async with session.post("/v1/responses", json={"model": "gpt-x", "input": "x", "stream": True}) as resp:
        frames = [c.decode() for c in await _http_chunks(resp)]
    assert "[DONE]" not in "".join(frames)
    for frame in frames:
        event_line, data_line = frame.strip("\n").split("\n")
        assert json.loads(data_line.removeprefix("data: "))["type"] == event_line.removeprefix("event: ")


async def test_ids_are_deterministic_per_simulator():
    def ids(app):
        state = app[STATE_KEY]
        return [state.ids.make("msg_01"), state.ids.make("call_"), state.ids.make("resp_")]

    first, second = ids(create_app()), ids(create_app())
    assert first == second and len(set(first)) == 3
    assert len(first[0]) == len("msg_01") + 22 and len(first[2]) == len("resp_") + 48


def test_simulator_imports_only_the_token_counter():
    root = Path(__file__).resolve().parents[2] / "simulator"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("ctxscope") and not name.startswith("ctxscope.simulator"):
                    assert name == "ctxscope.vocab.tokens", f"{path.name} imports {name}"


async def test_compressed_request_bodies_are_decoded(sim):
    import gzip

    from backports import zstd

    session, state = sim
    state.reset()
    body = json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": "squeezed"}]}).encode()
    for encoding, data in (("gzip", gzip.compress(body)), ("zstd", zstd.compress(body))):
        headers = {"content-encoding": encoding, "content-type": "application/json"}
        async with session.post("/v1/chat/completions", data=data, headers=headers) as resp:
            assert (await resp.json())["choices"][0]["message"]["content"] == "sim: squeezed"


def test_request_log_is_bounded():
    from ctxscope.simulator.control.requestlog import MAX_ENTRIES

    state = SimulatorState()
    for i in range(MAX_ENTRIES + 5):
        state.log({"n": i})
    logged = state.requests()
    assert len(logged) == MAX_ENTRIES and logged[-1]["n"] == MAX_ENTRIES + 4


def test_load_script_file(tmp_path):
    from ctxscope.simulator.model.script import ScriptError, load_script_file

    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"text": "hi"}, {"tool_calls": [{"name": "ls"}]}]))
    assert load_script_file(str(good)) == [{"text": "hi"}, {"tool_calls": [{"name": "ls"}]}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"txet": "typo"}]))
    with pytest.raises(ScriptError):
        load_script_file(str(bad))


async def test_a_fixed_clock_set_over_http_expires_cache_entries_at_replayed_times(sim):
    session, state = sim
    body = {
        "model": "claude-sim",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "rule " * 1500, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    reads = []
    for at in (1_000.0, 1_200.0, 1_600.0):  # 200 s later: read; 400 s after that: the 5m entry expired
        async with session.post("/_sim/config", json={"clock": at}) as resp:
            assert (await resp.json())["clock"] == at
        async with session.post("/v1/messages", json=body) as resp:
            reads.append((await resp.json())["usage"]["cache_read_input_tokens"])
    assert reads[0] == 0 and reads[1] > 1000 and reads[2] == 0
    async with session.post("/_sim/config", json={"clock": None}) as resp:
        assert await resp.json() == {"context_window": state.context_window}
    async with session.post("/_sim/config", json={"clock": "soon"}) as resp:
        assert resp.status == 400
