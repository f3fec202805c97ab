"""Bad input and broken upstreams, through the real daemon: nothing is lost, errors keep their shape."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time

import anthropic
import httpx2
import openai
import pytest
from backports import zstd

from ctxscope.inspector import queries
from ctxscope.daemon import start_daemon
from ctxscope.settings import DaemonConfig

KEY = "sk-ant-test-FAULTKEY-987654321"


def _post(url, body: bytes, headers=None, timeout=30):
    with httpx2.Client(timeout=timeout) as c:
        return c.post(url, content=body, headers=headers or {})


def test_compressed_request_bodies_forwarded_exact_and_captured_decoded(proxy, sim):
    payload = json.dumps({"model": "gpt-sim", "messages": [{"role": "user", "content": "compressed hello"}]}).encode()
    for encoding, data in (("gzip", gzip.compress(payload)), ("zstd", zstd.compress(payload))):
        r = _post(proxy.url + "/u/sim/v1/chat/completions", data,
                  {"content-type": "application/json", "content-encoding": encoding, "authorization": f"Bearer {KEY}"})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "sim: compressed hello"
    rows = proxy.wait_for_calls(2)
    db = queries.open_db(proxy.db_path)
    for row, (encoding, data) in zip(rows, (("gzip", gzip.compress(payload)), ("zstd", None))):
        raw = queries.get_request_raw(db, row["id"])
        assert raw[:2] == b"\x1f\x8b" if encoding == "gzip" else raw[:4] == b"\x28\xb5\x2f\xfd"
        assert queries.get_request_json(db, row["id"])["messages"][0]["content"] == "compressed hello"
    sent_gzip = gzip.compress(payload)  # gzip embeds a timestamp: compare against what we really sent
    assert queries.get_request_body(db, rows[0]["id"]) == payload
    assert len(sent_gzip) > 0


def test_malformed_json_is_forwarded_unchanged_and_captured_unparsed(proxy, sim):
    body = b'{"model": "claude-sim", "messages": [oops'
    r = _post(proxy.url + "/anthropic/v1/messages", body,
              {"content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert r.status_code == 400 and r.json()["type"] == "error"  # the upstream's own answer, passed through
    [row] = proxy.wait_for_calls(1)
    db = queries.open_db(proxy.db_path)
    assert queries.get_request_raw(db, row["id"]) == body
    assert queries.get_call(db, row["id"])["request_json_ok"] == 0
    assert queries.get_request_json(db, row["id"]) is None


def test_upstream_reset_mid_stream(proxy, sim):
    sim.state().set_script([{"text": "a long answer " * 20, "reset_after_events": 4}])
    client = anthropic.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError, httpx2.ReadError)):
        with client.messages.stream(model="claude-sim", max_tokens=100,
                                    messages=[{"role": "user", "content": "go"}]) as stream:
            stream.get_final_message()
    [row] = proxy.wait_for_calls(1)
    assert row["outcome"] == "upstream_reset"
    call = queries.get_call(queries.open_db(proxy.db_path), row["id"])
    assert call["response_complete"] == 0
    assert b"message_start" in queries.get_response_raw(queries.open_db(proxy.db_path), row["id"])


def test_in_stream_error_event_is_captured(proxy, sim):
    sim.state().set_script([{"text": "partial", "stream_error": {"type": "overloaded_error", "message": "busy"}}])
    client = anthropic.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="claude-sim", max_tokens=100,
                                    messages=[{"role": "user", "content": "go"}]) as stream:
            stream.get_final_message()
    [row] = proxy.wait_for_calls(1)
    assert row["status"] == 200
    call = queries.get_call(queries.open_db(proxy.db_path), row["id"])
    assert call["response_error"]["type"] in ("overloaded_error", "error")
    assert "overloaded" in json.dumps(call["response_error"])


def test_client_disconnect_mid_stream(proxy, sim):
    sim.state().set_script([{"text": "slow " * 50, "chunk_delay_ms": 30}])
    client = openai.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    stream = client.chat.completions.create(model="gpt-sim", stream=True, messages=[{"role": "user", "content": "x"}])
    next(iter(stream))
    stream.close()
    [row] = proxy.wait_for_calls(1, timeout=15)
    assert row["outcome"] == "client_disconnected"


def test_fifty_megabyte_body_is_forwarded_and_captured(proxy, sim):
    big = json.dumps({"purpose": "upload", "data": "x" * (50 * 2**20)}).encode()
    # A path the simulator does not serve: the body is forwarded whole and the 404 passes through.
    r = _post(proxy.url + "/u/sim/v1/uploads", big, {"content-type": "application/json"}, timeout=120)
    assert r.status_code == 404
    [row] = proxy.wait_for_calls(1, timeout=60)
    assert row["request_bytes"] == len(big)
    assert queries.get_request_raw(queries.open_db(proxy.db_path), row["id"]) == big


def test_upstream_down_gives_provider_error_and_is_captured(loop_thread, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cfg = DaemonConfig(host="127.0.0.1", port=0, db=tmp_path / "c.db",
                       upstreams={"anthropic": f"http://127.0.0.1:{dead}", "openai": f"http://127.0.0.1:{dead}"})
    daemon = loop_thread.call(start_daemon(cfg))
    try:
        with caplog.at_level(logging.DEBUG):
            client = anthropic.Anthropic(api_key=KEY, base_url=daemon.url + "/anthropic", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                client.messages.create(model="claude-sim", max_tokens=5, messages=[{"role": "user", "content": "x"}])
            assert info.value.status_code == 502
            oclient = openai.OpenAI(api_key=KEY, base_url=daemon.url + "/openai/v1", max_retries=0)
            with pytest.raises(openai.APIStatusError) as oinfo:
                oclient.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "x"}])
            assert oinfo.value.status_code == 502 and oinfo.value.code == "upstream_unreachable"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(queries.list_calls(queries.open_db(cfg.db))) < 2:
                time.sleep(0.05)
    finally:
        loop_thread.call(daemon.stop())
    rows = queries.list_calls(queries.open_db(cfg.db), newest_first=False)
    assert [r["outcome"] for r in rows] == ["upstream_unreachable"] * 2
    assert KEY not in caplog.text


@pytest.mark.parametrize("writer_mode", ["thread"])  # the fault is injected into this process's writer
def test_store_failure_never_breaks_traffic_is_reported_and_loses_nothing(writer_mode, proxy, sim, monkeypatch, caplog):
    import sqlite3

    from ctxscope.inspector import writer as writer_module

    real = writer_module.ingest
    broken = {"on": True}

    def ingest(*args, **kwargs):
        if broken["on"]:
            raise sqlite3.OperationalError("disk I/O error")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "ingest", ingest)
    proxy.daemon.writer.retry_interval = 0.1
    client = openai.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    with caplog.at_level(logging.WARNING, logger="ctxscope.store"):
        for i in range(3):
            reply = client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": f"q{i}"}])
            assert reply.choices[0].message.content == f"sim: q{i}"
        deadline = time.monotonic() + 10
        while proxy.daemon.writer.stats().store_failures < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = proxy.daemon.writer.stats()
        assert stats.store_failures >= 2 and stats.queued == 3 and stats.failed == 0 and stats.written == 0
        assert stats.store_down_since is not None and "disk I/O error" in stats.last_error
        assert queries.db_status(proxy.db_path)["calls"] == 0
        broken["on"] = False  # the disk recovers
        proxy.wait_for_calls(3)
    assert "disk I/O error" in caplog.text and KEY not in caplog.text
    status = queries.db_status(proxy.db_path)
    assert status["calls"] == 3 and status["writer"]["store_unavailable"] >= 1
    assert "disk I/O error" in json.dumps(status)
