"""The Responses API over WebSocket: the real openai SDK's responses.connect() through the daemon to
the simulator (an independent implementation of the socket), and an upstream that refuses it."""

from __future__ import annotations

import json
import types

import aiohttp
import pytest
from aiohttp import web

import ctxscope.simulator.sockets as sim_sockets
from ctxscope.inspector.store import queries

from support import sdk_clients
from support.proxy_rig import serve_app, start_proxy

KEY = "sk-test-websocket-0123456789abcdef"
MODEL = "gpt-5"
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}


class _TappedSocket(web.WebSocketResponse):
    """The simulator's side of the socket, remembering every text frame it received and sent."""

    received: list[str]
    sent: list[str]

    async def receive(self, timeout=None):
        msg = await super().receive(timeout)
        if msg.type == aiohttp.WSMsgType.TEXT:
            self.received.append(msg.data)
        return msg

    async def send_str(self, data, compress=None):
        self.sent.append(data)
        await super().send_str(data, compress)


@pytest.fixture
def upstream_tap(monkeypatch):
    seen: dict[str, list[str]] = {"received": [], "sent": []}

    class Tapped(_TappedSocket):
        received, sent = seen["received"], seen["sent"]

    monkeypatch.setattr(sim_sockets, "web", types.SimpleNamespace(WebSocketResponse=Tapped))
    return seen


@pytest.fixture
def checked_proxy(proxy):
    """The daemon, checked after the test: no call failed to store or analyse."""
    yield proxy
    stats_now = proxy.daemon.writer.stats()
    assert stats_now.analysis_failed == 0 and stats_now.failed == 0, stats_now.last_error


def _turn(conn, event: dict) -> list[bytes]:
    conn.send(event)
    frames = []
    while True:
        frames.append(conn.recv_bytes())
        if json.loads(frames[-1])["type"] in TERMINAL:
            return frames


def test_sdk_connect_two_turns_frames_identical_and_recorded(checked_proxy, sim, upstream_tap):
    proxy = checked_proxy
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    sim.state().set_script([{"text": "The first answer."}, {"text": "The second answer."}])
    first_input = [{"role": "user", "content": "Hello over a socket."}]
    with client.responses.connect() as conn:
        one = _turn(conn, {"type": "response.create", "model": MODEL, "input": first_input})
        answer = json.loads(one[-1])["response"]["output"]
        second_input = [*first_input, *answer, {"role": "user", "content": "And a second question."}]
        two = _turn(conn, {"type": "response.create", "model": MODEL, "input": second_input})

    # The frames both sides saw are identical, in order.
    assert [f.decode() for f in one + two] == upstream_tap["sent"]
    assert [json.loads(t) for t in upstream_tap["received"]] == [
        {"type": "response.create", "model": MODEL, "input": first_input},
        {"type": "response.create", "model": MODEL, "input": second_input},
    ]
    assert json.loads(one[-1])["type"] == json.loads(two[-1])["type"] == "response.completed"

    rows = proxy.wait_for_calls(2)
    assert [(r["method"], r["api"], r["outcome"], r["status"]) for r in rows] == [
        ("WEBSOCKET", "openai.responses", "ok", 101)
    ] * 2
    assert [r["relation"] for r in rows] == ["EPOCH_START", "APPEND_ONLY"]
    assert rows[0]["session"] == rows[1]["session"] and rows[1]["predecessor"] == rows[0]["id"]
    usage = json.loads(two[-1])["response"]["usage"]
    assert rows[1]["usage"]["input"] == usage["input_tokens"] and rows[1]["usage"]["output"] == usage["output_tokens"]
    assert rows[1]["tokens_estimated"] == usage["input_tokens"]
    db = queries.open_db(proxy.db_path)
    try:
        assert queries.get_request_raw(db, rows[1]["id"]) == upstream_tap["received"][1].encode()
        detail = queries.get_call(db, rows[1]["id"])
    finally:
        db.conn.close()
    assert detail["response_id"] == json.loads(two[-1])["response"]["id"]
    assert KEY not in json.dumps(detail, default=str)


async def test_a_refused_upgrade_reaches_the_client_as_the_upstream_answered():
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": {"message": "sockets are off", "code": "no_ws"}}, status=403, headers={"X-Upstream": "refused"}
        )

    app = web.Application()
    app.router.add_get("/v1/responses", refuse)
    runner, url = await serve_app(app)
    proxy = await start_proxy({"openai": url})
    try:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{proxy.base}/openai/v1/responses", headers={"Authorization": f"Bearer {KEY}"})
            assert refused.value.status == 403 and refused.value.headers["X-Upstream"] == "refused"
            raw_headers = {
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            }
            async with http.get(f"{proxy.base}/openai/v1/responses", headers=raw_headers) as resp:
                assert resp.status == 403 and await resp.json() == {
                    "error": {"message": "sockets are off", "code": "no_ws"}
                }
        first, second = await proxy.sink.wait(2)
        assert (first.method, first.status, first.outcome) == ("GET", 403, "http_error")
        assert b"sockets are off" in second.response_body
        assert all(v == "[redacted]" for k, v in first.request_headers if k.lower() == "authorization")
    finally:
        await proxy.stop()
        await runner.cleanup()


async def test_a_client_that_leaves_mid_answer_is_recorded_as_disconnected(sim_alone):
    sim_alone.state.set_script([{"text": "one two three four five six seven eight nine ten", "chunk_delay_ms": 200}])
    proxy = await start_proxy({"openai": sim_alone.base_url})
    try:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{proxy.base}/openai/v1/responses")
            await ws.send_str(json.dumps({"type": "response.create", "model": MODEL, "input": "count"}))
            first = await ws.receive()
            assert json.loads(first.data)["type"] == "response.created"
            await ws.close()
        [call] = await proxy.sink.wait(1)
        assert (call.method, call.outcome, call.extra["transport"]) == ("WEBSOCKET", "client_disconnected", "websocket")
        assert call.response_body.startswith(b"data: " + first.data.encode())
    finally:
        await proxy.stop()


async def test_the_daemons_shutdown_closes_sockets_and_records_their_calls_as_interrupted(sim_alone):
    sim_alone.state.set_script([{"text": "one two three four five six seven eight nine ten", "chunk_delay_ms": 300}])
    proxy = await start_proxy({"openai": sim_alone.base_url})
    stopped = False
    try:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{proxy.base}/openai/v1/responses")
            await ws.send_str(json.dumps({"type": "response.create", "model": MODEL, "input": "count"}))
            assert json.loads((await ws.receive()).data)["type"] == "response.created"
            await proxy.stop()
            stopped = True
            closing = await ws.receive()
            assert closing.type == aiohttp.WSMsgType.CLOSE and closing.data == aiohttp.WSCloseCode.GOING_AWAY
            await ws.close()
        [call] = proxy.sink.items
        assert call.outcome == "interrupted"
    finally:
        if not stopped:
            await proxy.stop()
