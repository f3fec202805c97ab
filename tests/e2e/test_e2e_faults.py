"""Bad input and broken upstreams, through the real daemon: nothing is lost, errors keep their shape."""

from __future__ import annotations

import asyncio
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

from ctxscope.daemon import start_daemon
from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store import queries
from ctxscope.settings import DaemonConfig

from support import sdk_clients

KEY = "sk-ant-test-FAULTKEY-987654321"


def _post(url, body: bytes, headers=None, timeout=30):
    with httpx2.Client(timeout=timeout) as c:
        return c.post(url, content=body, headers=headers or {})


def test_compressed_request_bodies_forwarded_exact_and_captured_decoded(proxy, sim):
    payload = json.dumps({"model": "gpt-sim", "messages": [{"role": "user", "content": "compressed hello"}]}).encode()
    for encoding, data in (("gzip", gzip.compress(payload)), ("zstd", zstd.compress(payload))):
        r = _post(
            proxy.url + "/u/sim/v1/chat/completions",
            data,
            {"content-type": "application/json", "content-encoding": encoding, "authorization": f"Bearer {KEY}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "sim: compressed hello"
    rows = proxy.wait_for_calls(2)
    db = queries.open_db(proxy.db_path)
    for row, (encoding, _data) in zip(rows, (("gzip", gzip.compress(payload)), ("zstd", None)), strict=True):
        raw = queries.get_request_raw(db, row["id"])
        assert raw[:2] == b"\x1f\x8b" if encoding == "gzip" else raw[:4] == b"\x28\xb5\x2f\xfd"
        assert queries.get_request_json(db, row["id"])["messages"][0]["content"] == "compressed hello"
    sent_gzip = gzip.compress(payload)  # gzip embeds a timestamp: compare against what we really sent
    assert queries.get_request_body(db, rows[0]["id"]) == payload
    assert len(sent_gzip) > 0


def test_malformed_json_is_forwarded_unchanged_and_captured_unparsed(proxy, sim):
    body = b'{"model": "claude-sim", "messages": [oops'
    r = _post(
        proxy.url + "/anthropic/v1/messages",
        body,
        {"content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 400 and r.json()["type"] == "error"  # the upstream's own answer, passed through
    [row] = proxy.wait_for_calls(1)
    db = queries.open_db(proxy.db_path)
    assert queries.get_request_raw(db, row["id"]) == body
    assert queries.get_call(db, row["id"])["request_json_ok"] == 0
    assert queries.get_request_json(db, row["id"]) is None


def test_upstream_reset_mid_stream(proxy, sim):
    sim.state().set_script([{"text": "a long answer " * 20, "reset_after_events": 4}])
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    with (
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError, httpx2.ReadError)),
        client.messages.stream(
            model="claude-sim", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        ) as stream,
    ):
        stream.get_final_message()
    [row] = proxy.wait_for_calls(1)
    assert row["outcome"] == "upstream_reset"
    call = queries.get_call(queries.open_db(proxy.db_path), row["id"])
    assert call["response_complete"] == 0
    assert b"message_start" in queries.get_response_raw(queries.open_db(proxy.db_path), row["id"])


def test_in_stream_error_event_is_captured(proxy, sim):
    sim.state().set_script([{"text": "partial", "stream_error": {"type": "overloaded_error", "message": "busy"}}])
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(
            model="claude-sim", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        ) as stream,
    ):
        stream.get_final_message()
    [row] = proxy.wait_for_calls(1)
    assert row["status"] == 200
    call = queries.get_call(queries.open_db(proxy.db_path), row["id"])
    assert call["response_error"]["type"] in ("overloaded_error", "error")
    assert "overloaded" in json.dumps(call["response_error"])


def test_client_disconnect_mid_stream(proxy, sim):
    sim.state().set_script([{"text": "slow " * 50, "chunk_delay_ms": 30}])
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    stream = client.chat.completions.create(model="gpt-sim", stream=True, messages=[{"role": "user", "content": "x"}])
    next(iter(stream))
    stream.close()
    [row] = proxy.wait_for_calls(1)
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
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp_path / "c.db",
        upstreams={"anthropic": f"http://127.0.0.1:{dead}", "openai": f"http://127.0.0.1:{dead}"},
    )
    daemon = loop_thread.call(start_daemon(cfg))
    try:
        with caplog.at_level(logging.DEBUG):
            client = sdk_clients.Anthropic(api_key=KEY, base_url=daemon.url + "/anthropic", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                client.messages.create(model="claude-sim", max_tokens=5, messages=[{"role": "user", "content": "x"}])
            assert info.value.status_code == 502
            oclient = sdk_clients.OpenAI(api_key=KEY, base_url=daemon.url + "/openai/v1", max_retries=0)
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

    from ctxscope.inspector.writer.storing import work as writer_module

    real = writer_module.ingest
    broken = {"on": True}

    def ingest(*args, **kwargs):
        if broken["on"]:
            raise sqlite3.OperationalError("disk I/O error")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "ingest", ingest)
    proxy.daemon.writer.retry_interval = 0.1
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
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
        assert db_status(proxy.db_path)["calls"] == 0
        broken["on"] = False  # the disk recovers
        proxy.wait_for_calls(3)
    assert "disk I/O error" in caplog.text and KEY not in caplog.text
    status = db_status(proxy.db_path)
    assert status["calls"] == 3 and status["writer"]["store_unavailable"] >= 1
    assert "disk I/O error" in json.dumps(status)


# -- abuse limits and honest outcomes, through the real daemon ------------------------------------

SECRET = "Zq8VvY2mK9pLx4TnR7wB1cD6fG3hJ5kM"


def test_credentials_in_the_query_and_in_custom_headers_never_reach_the_store(proxy, sim, tmp_path):
    client = sdk_clients.OpenAI(
        api_key=KEY,
        base_url=proxy.url + "/openai/v1",
        max_retries=0,
        default_query={"auth": "hunter2-AUTH", "key[]": "ARRAYKEY-123", "sig": "SIGVALUE"},
        default_headers={"X-Custom-Thing": SECRET, "X-Gh": "ghp_abcdefghijklmnopqrstuvwxyz0123"},
    )
    reply = client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content == "sim: hello"
    [row] = proxy.wait_for_calls(1)
    call = queries.get_call(queries.open_db(proxy.db_path), row["id"])
    headers = {k.lower(): v for k, v in call["request_headers"]}
    assert "auth=%5Bredacted%5D" in call["query"] and headers["x-custom-thing"] == "[redacted]"
    proxy.stop()  # everything written: the database, its WAL and any spool are final
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "home" not in p.parts)
    for secret in ("hunter2-AUTH", "ARRAYKEY-123", "SIGVALUE", SECRET, "ghp_abcdefghij", KEY):
        assert secret.encode() not in stored, secret


class _Forever:
    """An upstream in the test's loop thread: a stream that never ends, or an answer that never comes."""

    def __init__(self, loop_thread):
        from aiohttp import web

        self.gone_at = None

        async def handle(request):
            await request.read()
            if request.path.endswith("/think"):
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    self.gone_at = time.monotonic()
                    raise
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            while True:
                await resp.write(b'data: {"more": true}\n\n')
                await asyncio.sleep(0.05)

        async def start():
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

        self.loop_thread = loop_thread
        self.runner, self.url = loop_thread.call(start())


def test_a_client_leaving_a_thinking_upstream_is_recorded_within_a_second(loop_thread, tmp_path, monkeypatch):
    from ctxscope.settings import Limits

    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    upstream = _Forever(loop_thread)
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp_path / "c.db",
        upstreams={"anthropic": upstream.url + "/x"},
        limits=Limits(shutdown_grace=1),
    )
    daemon = loop_thread.call(start_daemon(cfg))
    try:
        client = sdk_clients.Anthropic(api_key=KEY, base_url=daemon.url + "/anthropic", max_retries=0, timeout=0.5)
        with pytest.raises(anthropic.APITimeoutError):
            client.post("/think", cast_to=object, body={"model": "m"})
        left = time.monotonic()
        db = tmp_path / "c.db"
        while time.monotonic() - left < 10 and not (db.exists() and queries.list_calls(queries.open_db(db))):
            time.sleep(0.02)
        recorded = time.monotonic()
    finally:
        loop_thread.call(daemon.stop())
        loop_thread.call(upstream.runner.cleanup())
    [row] = queries.list_calls(queries.open_db(db))
    assert row["outcome"] == "client_disconnected"
    assert upstream.gone_at is not None and upstream.gone_at - left < 1.0
    assert recorded - left < 5.0  # stored by the writer process: generous on a loaded machine


def test_stopping_the_daemon_cuts_a_never_ending_stream_as_interrupted(loop_thread, tmp_path, monkeypatch):
    import threading

    from ctxscope.settings import Limits

    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    upstream = _Forever(loop_thread)
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp_path / "c.db",
        upstreams={"openai": upstream.url},
        limits=Limits(shutdown_grace=0.5),
    )
    daemon = loop_thread.call(start_daemon(cfg))
    streaming, ended = threading.Event(), []

    def read():
        try:
            with (
                httpx2.Client(timeout=30) as c,
                c.stream("POST", daemon.url + "/openai/v1/chat/completions", content=b'{"stream": true}') as r,
            ):
                for _ in r.iter_raw():
                    streaming.set()
        except Exception as exc:  # the cut, as the client sees it
            ended.append(exc)
        else:
            ended.append(None)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert streaming.wait(10)
        started = time.monotonic()
        loop_thread.call(daemon.stop())
        stopped = time.monotonic()
    finally:
        reader.join(10)
        loop_thread.call(upstream.runner.cleanup())
    assert stopped - started < 10
    assert ended and ended[0] is not None  # the client saw a cut, not a clean end
    [row] = queries.list_calls(queries.open_db(cfg.db))
    assert row["outcome"] == "interrupted" and row["status"] == 200


def _raw_until_closed(port: int, first: bytes, trickle: bytes, every: float, within: float) -> float:
    """Send ``first`` then ``trickle`` a byte at a time; seconds until the daemon closed the connection."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(every)
        s.sendall(first)
        for byte in trickle:
            if time.monotonic() - started > within:
                raise AssertionError(f"still open after {within}s")
            try:
                s.sendall(bytes([byte]))
                if s.recv(65536) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
    return time.monotonic() - started


def test_serve_with_limits_closes_slow_clients_and_marks_streams_cut_by_sigterm(loop_thread, tmp_path):
    import re
    import signal
    import subprocess
    import sys

    upstream = _Forever(loop_thread)
    env = {**__import__("os").environ, "CTXSCOPE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxscope.main",
            "serve",
            "--port",
            "0",
            "--db",
            str(tmp_path / "c.db"),
            "--upstream",
            f"forever={upstream.url}",
            "--limit",
            "header_timeout=0.5",
            "--limit",
            "body_timeout=0.5",
            "--limit",
            "keepalive_timeout=1",
            "--limit",
            "shutdown_grace=0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for _ in range(50):  # the daemon says where it listens among its first lines
            listening = re.search(r"listening on http://127\.0\.0\.1:(\d+)", proc.stdout.readline())
            if listening:
                break
        port = int(listening.group(1))
        head = b"POST /u/forever/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        assert _raw_until_closed(port, b"", head + b"X-Slow: " + b"a" * 400, 0.05, 10) < 5
        assert _raw_until_closed(port, head + b"Content-Length: 1000000\r\n\r\n", b" " * 1000, 0.05, 10) < 5
        with socket.create_connection(("127.0.0.1", port)) as s:  # an idle keep-alive connection
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.settimeout(10)
            started = time.monotonic()
            while s.recv(65536):
                pass
            assert time.monotonic() - started < 5

        with socket.create_connection(("127.0.0.1", port)) as s:  # a stream that never ends, then SIGTERM
            s.sendall(head + b"Content-Length: 2\r\n\r\n{}")
            s.settimeout(10)
            assert b"200 OK" in s.recv(65536)
            proc.send_signal(signal.SIGTERM)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            assert not got.endswith(b"0\r\n\r\n")  # no clean end of the chunked body
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        loop_thread.call(upstream.runner.cleanup())
    stderr = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert "Traceback" not in stderr, stderr
    rows = queries.list_calls(queries.open_db(tmp_path / "c.db"), newest_first=False)
    assert [r["outcome"] for r in rows] == ["client_disconnected", "interrupted"], stderr


def test_a_body_over_the_limit_is_answered_413_and_stored_as_request_too_large(loop_thread, sim, tmp_path, monkeypatch):
    from ctxscope.settings import Limits

    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp_path / "c.db",
        upstreams={"anthropic": sim.url},
        limits=Limits(max_body_bytes=2**20),
    )
    daemon = loop_thread.call(start_daemon(cfg))
    try:
        client = sdk_clients.Anthropic(api_key=KEY, base_url=daemon.url + "/anthropic", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            client.messages.create(
                model="claude-sim", max_tokens=5, messages=[{"role": "user", "content": "x" * 2**21}]
            )
        assert info.value.status_code == 413 and info.value.body["error"]["type"] == "request_too_large"
        reply = client.messages.create(
            model="claude-sim", max_tokens=5, messages=[{"role": "user", "content": "small"}]
        )
        assert reply.content[0].text
    finally:
        loop_thread.call(daemon.stop())
    rows = queries.list_calls(queries.open_db(cfg.db), newest_first=False)
    assert [r["outcome"] for r in rows] == ["request_too_large", "ok"]
    assert rows[0]["request_bytes"] == 0 and sim.written and len(sim.written) == 1  # never forwarded
    call = queries.get_call(queries.open_db(cfg.db), rows[0]["id"])
    assert str(2**20) in call["error"] and "max_body_bytes" in call["error"]
