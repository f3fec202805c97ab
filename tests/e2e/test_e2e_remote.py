"""The installed `ctxscope serve` against the probe's attacks on who may use it: remote mode without
its key, a DNS-rebinding Host and a cross-site page on provider routes and the WebSocket relay, a
session label full of terminal escapes, and an OTLP collector that answers with a huge error body.
The legit clients (the openai SDK over HTTP and over a WebSocket) keep working throughout."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import aiohttp
import httpx2
import openai
import pytest

from support import sdk_clients
from support.serve_process import CTXSCOPE, running_serve

KEY = "sk-test-remote-0123456789abcdef"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def _settled(base: str, expect: set[str], headers: dict[str, str] | None = None, timeout: float = 30.0) -> set[str]:
    """The daemon's session labels once those expected are stored and nothing waits to be."""
    deadline = time.monotonic() + timeout
    while True:
        writer = httpx2.get(f"{base}/_ctxscope/api/status?store=0", headers=headers, timeout=5).json()["writer"]
        sessions = httpx2.get(f"{base}/_ctxscope/api/sessions", headers=headers, timeout=10).json()["sessions"]
        labels = {row.get("session") for row in sessions}
        if expect <= labels and writer and writer["queued"] == 0:
            return labels
        assert time.monotonic() < deadline, (labels, writer)
        time.sleep(0.2)


def _chat(base: str, label: str, **headers: str):
    client = sdk_clients.OpenAI(
        api_key=KEY, base_url=f"{base}/s/{label}/u/sim/v1", max_retries=0, default_headers=headers or None
    )
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])


async def _socket_status(url: str, headers: dict[str, str]) -> int:
    """The status a WebSocket upgrade gets (101 when it was accepted)."""
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


# -- remote mode ---------------------------------------------------------------------------------


def test_remote_mode_needs_the_key_printed_at_start(tmp_path):
    with running_serve(tmp_path, "--allow-remote") as (_proc, base):
        announced = (tmp_path / "serve.log").read_text()
        assert "REMOTE MODE" in announced and "provider routes need no key" in announced
        key = re.search(r"need this key \(it is shown only now\): (\S+)", announced).group(1)

        # A peer without the key gets no page (so no write token) and no API.
        page = httpx2.get(f"{base}/", timeout=5)
        assert page.status_code == 401 and "X-Ctxscope-Token" not in page.text and "__" not in page.text
        for path in ("/_ctxscope/api/sessions", "/_ctxscope/api/status", "/_ctxscope/api/events"):
            assert httpx2.get(base + path, timeout=5).status_code == 401, path
        assert httpx2.get(f"{base}/?key=not-the-key", timeout=5).status_code == 401
        assert httpx2.delete(f"{base}/_ctxscope/api/session?s=x", timeout=5).status_code == 401
        assert (
            httpx2.get(f"{base}/_ctxscope/api/sessions", headers={"X-Ctxscope-Key": key + "x"}, timeout=5).status_code
            == 401
        )

        # The key logs in: an HttpOnly, SameSite=Strict cookie, then the page and the API.
        login = httpx2.get(f"{base}/?key={key}", timeout=5)
        assert login.status_code == 200
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = {"ctxscope_key": key}
        assert httpx2.get(f"{base}/", cookies=jar, timeout=5).status_code == 200
        assert (
            httpx2.get(
                f"{base}/_ctxscope/api/sessions", headers={"Authorization": f"Bearer {key}"}, timeout=5
            ).status_code
            == 200
        )

        # Provider routes answer peers whatever name they know this machine by.
        answer = _chat(base, "remote-peer", Host="ctxscope-box.lan")
        assert answer.choices[0].message.content
        _settled(base, {"remote-peer"}, {"X-Ctxscope-Key": key})


def test_local_mode_stays_open_to_this_machine(tmp_path):
    with running_serve(tmp_path) as (_proc, base):
        page = httpx2.get(f"{base}/", timeout=5)
        assert page.status_code == 200 and "REMOTE MODE" not in (tmp_path / "serve.log").read_text()
        assert httpx2.get(f"{base}/_ctxscope/api/sessions", timeout=5).status_code == 200


# -- provider routes and the WebSocket relay -------------------------------------------------------


def test_rebinding_host_and_cross_site_origin_refused_sdks_work(tmp_path):
    with running_serve(tmp_path) as (_proc, base):
        port = base.rsplit(":", 1)[1]
        # DNS rebinding: the page's own name in Host, through the real SDK's HTTP and an upgrade.
        with pytest.raises(openai.PermissionDeniedError) as refused:
            _chat(base, "rebound", Host=f"attacker.example:{port}")
        assert refused.value.body["code"] == "forbidden_host"
        ws_url = base.replace("http", "ws") + "/s/rebound-ws/u/sim/v1/responses"
        assert asyncio.run(_socket_status(ws_url, {"Host": f"attacker.example:{port}"})) == 403

        # A cross-site page: a simple POST (text/plain, no preflight) and a WebSocket from its origin.
        simple = httpx2.post(
            f"{base}/s/cross-site/u/sim/v1/chat/completions",
            content=json.dumps(CHAT),
            headers={
                "Content-Type": "text/plain",
                "Origin": "https://attacker.example",
                "Sec-Fetch-Site": "cross-site",
            },
            timeout=10,
        )
        assert simple.status_code == 403 and simple.json()["error"]["code"] == "forbidden_origin"
        assert simple.headers["content-security-policy"] == "sandbox"
        null_origin = httpx2.post(
            f"{base}/s/cross-site/u/sim/v1/chat/completions",
            content=json.dumps(CHAT),
            headers={"Content-Type": "text/plain", "Origin": "null"},
            timeout=10,
        )
        assert null_origin.status_code == 403
        anthropic_shape = httpx2.post(
            f"{base}/s/cross-site/anthropic/v1/messages",
            content=b"{}",
            headers={"Origin": "https://attacker.example"},
            timeout=10,
        )
        assert anthropic_shape.json()["type"] == "error"
        ws_url = base.replace("http", "ws") + "/s/cross-site-ws/u/sim/v1/responses"
        assert asyncio.run(_socket_status(ws_url, {"Origin": "https://attacker.example"})) == 403

        # SDK clients send no Origin and name 127.0.0.1: HTTP and the Responses socket both work.
        assert _chat(base, "sdk-http").choices[0].message.content
        client = sdk_clients.OpenAI(api_key=KEY, base_url=f"{base}/s/sdk-socket/u/sim/v1", max_retries=0)
        with client.responses.connect() as conn:
            conn.send({"type": "response.create", "model": "m", "input": [{"role": "user", "content": "hi"}]})
            kinds = []
            while not kinds or kinds[-1] not in ("response.completed", "response.failed", "error"):
                kinds.append(json.loads(conn.recv_bytes())["type"])
        assert kinds[-1] == "response.completed"

        labels = _settled(base, {"sdk-http", "sdk-socket"})
        assert not labels & {"rebound", "rebound-ws", "cross-site", "cross-site-ws"}, labels


# -- control characters ---------------------------------------------------------------------------

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
C1_CSI = "\u009b31m"  # the one-byte CSI, sent as UTF-8 in a header (read back as latin-1)
C1_LABEL = "c1" + C1_CSI.encode().decode("latin-1")


def test_escape_label_never_reaches_the_terminal(tmp_path):
    with running_serve(tmp_path) as (_proc, base):
        port = int(base.rsplit(":", 1)[1])
        label = "evil" + OSC52
        answer = httpx2.post(
            f"{base}/s/evil%1B%5D52%3Bc%3Bcm0gLXJmIH4%3D%07/u/sim/v1/chat/completions", json=CHAT, timeout=10
        )
        assert answer.status_code == 200
        with socket.create_connection(("127.0.0.1", port)) as raw:  # C1 in the session header: accepted
            body = json.dumps(CHAT).encode()
            raw.sendall(
                b"POST /u/sim/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nx-ctxscope-session: c1"
                + C1_CSI.encode()
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            assert raw.recv(100).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", port)) as raw:  # ESC in the header: refused, and logged
            raw.sendall(
                b"POST /u/sim/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"x-ctxscope-session: " + OSC52.encode() + b"\r\nContent-Length: 2\r\n\r\n{}"
            )
            assert b" 400 " in raw.recv(100)
        _settled(base, {label, C1_LABEL})  # stored as sent

        db = str(tmp_path / "c.db")
        call_id = json.loads(_run("calls", "--json", "--db", db).decode())[0]["id"]
        outputs = [
            _run("show", call_id, "--db", db),
            _run("show", call_id, "--json", "--db", db),
            _run("session", "evil", "--db", db),
            _run("session", "c1", "--db", db),
            _run("sessions", "--db", db),
            _run("sessions", "--json", "--db", db),
            _run("calls", "--db", db),
            _run("search", "hello", "--db", db),
        ]
        for out in outputs:
            assert b"\x1b" not in out and b"\x07" not in out and b"\xc2\x9b" not in out, out
        assert any(b"evil?]52" in out for out in outputs)
        listed = {row["session"] for row in json.loads(outputs[5].decode())}  # still JSON, the labels escaped
        assert {label, C1_LABEL} <= listed
    daemon_log = (tmp_path / "serve.log").read_bytes()
    assert b"Invalid header value" in daemon_log or b"BadHttpMessage" in daemon_log
    assert b"\x1b" not in daemon_log and b"\x07" not in daemon_log and b"\xc2\x9b" not in daemon_log
    assert b"Traceback" not in daemon_log


def _run(*args: str) -> bytes:
    """The installed command's stdout and stderr together (both reach the terminal)."""
    done = subprocess.run([str(CTXSCOPE), *args], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout + done.stderr


# -- OTLP ------------------------------------------------------------------------------------------

HUGE = 300 * 1024 * 1024


class HugeErrorCollector:
    """A collector at a loopback port that answers every export with a 400 and a 300 MB body,
    counting the requests and the bytes it managed to send."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        self.sent = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        chunk = b"x" * (1024 * 1024)
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                try:
                    conn.sendall(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: "
                        + str(HUGE).encode()
                        + b"\r\n\r\n"
                    )
                    for _ in range(HUGE // len(chunk)):
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                except OSError:
                    pass  # the exporter hung up: what it read is bounded

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)
        self.listener.close()


def _rss_peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def test_otlp_collector_with_a_huge_error_body_costs_the_daemon_little(tmp_path):
    collector = HugeErrorCollector()
    try:
        with running_serve(tmp_path, "--otlp-endpoint", collector.url) as (proc, base):
            assert _chat(base, "otlp").choices[0].message.content
            _settled(base, {"otlp"})
            before = _rss_peak_mb(proc.pid)
            deadline = time.monotonic() + 60
            while collector.requests < 2:  # the first attempt and one retry after the pause
                assert time.monotonic() < deadline, "the export never reached the collector"
                time.sleep(0.2)
            time.sleep(1.0)
            grown = _rss_peak_mb(proc.pid) - before
            assert grown < 100, f"the daemon's peak RSS grew {grown:.0f} MB"
            assert collector.sent < HUGE // 4, collector.sent  # it hung up long before the end
    finally:
        collector.close()
    daemon_log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in daemon_log and "xxxxxxxx" not in daemon_log
