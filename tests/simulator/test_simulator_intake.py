"""What the simulator takes in: bodies it cannot decode or that are too large get the provider's own
error shape, and its request log keeps no credentials and no large body."""

from __future__ import annotations

import gzip
import json
import zlib

import aiohttp
import pytest
from backports import zstd

from ctxscope.simulator import body as body_module
from ctxscope.simulator.app import STATE_KEY, start_simulator
from ctxscope.simulator.control.requestlog import MAX_KEPT_BODY, RequestLog

LIMIT = 2 << 20  # the simulator's body limit in these tests
SECRET = "AIzaSyD-not-a-real-key-0123456789abcdef"


@pytest.fixture
async def sim():
    runner, url = await start_simulator(max_body=LIMIT)
    async with aiohttp.ClientSession(url, headers={"X-Sim-Token": runner.app[STATE_KEY].control_token}) as session:
        yield session, runner.app[STATE_KEY]
    await runner.cleanup()


def chat(text="hello"):
    return json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": text}]}).encode()


def messages(text="hello"):
    return json.dumps(
        {"model": "claude-sim", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    ).encode()


async def _post(session, path, data, encoding=None, **headers):
    headers = {"Content-Type": "application/json", **headers}
    if encoding:
        headers["Content-Encoding"] = encoding
    async with session.post(path, data=data, headers=headers) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.json(content_type=None)


def anthropic_error(body, etype):
    return body["type"] == "error" and body["error"]["type"] == etype and body["error"]["message"]


def openai_error(body):
    return set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["message"]


async def test_corrupt_gzip_and_zstd_get_a_provider_shaped_400(sim):
    session, _ = sim
    good_gzip = gzip.compress(chat())
    cases = {
        "gzip": [b"\x1f\x8b not gzip at all", good_gzip[:-12], good_gzip + b"trailing junk"],
        "zstd": [b"\x28\xb5\x2f\xfd garbage", zstd.compress(chat())[:-3]],
        "deflate": [b"not deflate"],
        "x-unknown": [chat()],
    }
    for encoding, bodies in cases.items():
        for data in bodies:
            status, ctype, body = await _post(session, "/v1/chat/completions", data, encoding)
            assert status == 400 and ctype.startswith("application/json") and openai_error(body), (encoding, body)
            status, _, body = await _post(session, "/v1/messages", data, encoding)
            assert status == 400 and anthropic_error(body, "invalid_request_error"), (encoding, body)


async def test_brotli_without_its_module_gets_a_provider_shaped_400(sim, monkeypatch):
    session, _ = sim
    monkeypatch.setattr(body_module, "_brotli", None)
    status, _, body = await _post(session, "/v1/messages", b"\x8b\x02\x80hello\x03", "br")
    assert status == 400 and anthropic_error(body, "invalid_request_error")
    assert "br is not supported" in body["error"]["message"] and "Please install" not in body["error"]["message"]
    status, _, body = await _post(session, "/v1/responses", b"\x8b\x02\x80hello\x03", "br")
    assert status == 400 and openai_error(body)


async def test_good_encodings_are_decoded(sim):
    session, _ = sim
    two_members = gzip.compress(chat("two members")[:20]) + gzip.compress(chat("two members")[20:])
    for encoding, data in (
        ("gzip", gzip.compress(chat("gz"))),
        ("gzip", two_members),
        ("deflate", zlib.compress(chat("zlib"))),
        ("zstd", zstd.compress(chat("zs"))),
        ("gzip, zstd", zstd.compress(gzip.compress(chat("both")))),
    ):
        status, _, body = await _post(session, "/v1/chat/completions", data, encoding)
        assert status == 200 and body["choices"][0]["message"]["content"].startswith("sim: "), (encoding, body)


async def test_bodies_over_the_limit_get_a_provider_shaped_413(sim):
    session, state = sim
    big = messages("x" * LIMIT)
    status, _, body = await _post(session, "/v1/messages", big)
    assert status == 413 and anthropic_error(body, "request_too_large")
    status, _, body = await _post(session, "/v1/chat/completions", chat("x" * LIMIT))
    assert status == 413 and openai_error(body) and body["error"]["code"] == "request_too_large"

    async def chunked():  # no Content-Length: the limit holds while reading
        for _ in range(40):
            yield b"x" * 65536

    status, _, body = await _post(session, "/v1/messages", chunked())
    assert status == 413 and anthropic_error(body, "request_too_large")
    # A bomb: 1 KB of gzip that inflates past the limit is refused without inflating it all.
    for encoding, data in (("gzip", gzip.compress(b" " * (LIMIT * 4))), ("zstd", zstd.compress(b" " * (LIMIT * 4)))):
        assert len(data) < LIMIT // 10
        status, _, body = await _post(session, "/v1/chat/completions", data, encoding)
        assert status == 413 and openai_error(body), encoding
    refused = [r for r in state.requests() if r["body"] and "refused" in r["body"]]
    assert len(refused) == 5 and all(r["body"]["status"] == 413 for r in refused)
    # The connection pool still works after refusals.
    status, _, _ = await _post(session, "/v1/chat/completions", chat())
    assert status == 200


async def test_the_log_holds_no_credentials(sim):
    session, _state = sim
    query = (
        f"key={SECRET}&api_key=k1secret&auth=plainpassword&key[]=arr-secret&key%5B%5D=enc-secret"
        f"&access_token=tok-secret&sig=sig-secret&token=t-secret&%6Bey=hex-secret&beta=true&x={SECRET}"
    )
    headers = {
        "x-api-key": "sk-ant-api03-abcdefghijkl",
        "X-Custom-Secret": "plain",
        "X-Forwarded-Thing": SECRET,
        "X-Opaque": "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo",
        "X-Other": "Bearer abcdefghijklmnop",
        "anthropic-version": "2023-06-01",
        "x-ctxscope-session": "20260509-120000-abcdef",
    }
    async with session.post(f"/v1/messages?{query}", data=messages(), headers=headers) as resp:
        assert resp.status == 200
    async with session.get("/_sim/requests") as resp:
        text = await resp.text()
    for secret in (
        SECRET,
        "k1secret",
        "plainpassword",
        "arr-secret",
        "enc-secret",
        "tok-secret",
        "sig-secret",
        "t-secret",
        "hex-secret",
        "sk-ant-api03",
        'plain"',
        "Zm9vYmFy",
        "abcdefghijklmnop",
    ):
        assert secret not in text, secret
    [entry] = json.loads(text)
    assert "beta=true" in entry["query"] and entry["query"].count("<redacted>") == 10
    assert entry["headers"]["anthropic-version"] == "2023-06-01"
    assert entry["headers"]["x-ctxscope-session"] == "20260509-120000-abcdef"
    assert entry["body"]["messages"][0]["content"] == "hello" and entry["bytes"] == len(messages())


async def test_a_large_body_is_logged_as_a_summary(sim):
    session, state = sim
    big = json.dumps(
        {"model": "gpt-x", "messages": [{"role": "user", "content": "y " * (MAX_KEPT_BODY // 2)}]}
    ).encode()
    assert MAX_KEPT_BODY < len(big) <= LIMIT
    state.context_window = 10**7
    async with session.post(
        "/v1/chat/completions",
        data=gzip.compress(big),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ) as resp:
        assert resp.status == 200
    async with session.get("/_sim/requests") as resp:
        text = await resp.text()
    assert len(text) < 4096
    [entry] = json.loads(text)
    import hashlib

    assert entry["body"] == {
        "summarized": True,
        "bytes": len(big),
        "sha256": hashlib.sha256(big).hexdigest(),
        "model": "gpt-x",
        "messages": 1,
    }


def test_the_log_is_bounded_by_bytes_and_count():
    log = RequestLog(max_entries=10, max_bytes=1000)
    for i in range(5):
        log.add({"n": i}, 300)
    assert [e["n"] for e in log.entries()] == [2, 3, 4] and log.bytes == 900
    for i in range(5, 30):
        log.add({"n": i}, 1)
    assert [e["n"] for e in log.entries()] == list(range(20, 30)) and log.bytes == 10
    log.add({"n": "huge"}, 5000)  # one entry over the byte bound alone is kept, as the newest
    assert [e["n"] for e in log.entries()] == ["huge"]
    log.clear()
    assert log.entries() == [] and log.bytes == 0


async def test_the_app_log_stays_within_its_byte_bound(sim, monkeypatch):
    session, state = sim
    monkeypatch.setattr(state._requests, "max_bytes", 3 * MAX_KEPT_BODY)
    state.context_window = 10**7
    body = chat("z " * (MAX_KEPT_BODY // 2 - 100))
    assert len(body) <= MAX_KEPT_BODY
    for _ in range(6):
        async with session.post("/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
    assert len(state.requests()) == 2 and state._requests.bytes <= 3 * MAX_KEPT_BODY
