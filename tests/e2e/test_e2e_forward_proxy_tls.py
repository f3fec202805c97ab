"""Intercepted CONNECT tunnels attacked the way the security probe did, against the installed
`ctxscope serve` (uvloop) in a process of its own: back-to-back handshakes, a ClientHello in the
CONNECT's own write, the openai SDK through httpx's proxy, a header trickled inside the tunnel,
hostile requests inside it, and a CA rotated under a running daemon."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

from ctxscope.inspector.store.queries import list_calls, open_db

from support.serve_process import CTXSCOPE, running_serve

HOST = "api.openai.com"
KEY = "sk-test-forward-0123456789abcdef"
BODY = json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _bundle(tmp_path: Path) -> Path:
    return tmp_path / "home" / "ca" / "bundle.pem"


def _connect_head(port: int, payload: bytes = b"") -> tuple[socket.socket, bytes]:
    """A CONNECT to api.openai.com:443 (with ``payload`` in the same write); the 200 head is read
    and the bytes after it returned."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode() + payload)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, f"closed before the CONNECT answer: {got!r}"
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock, rest


def _request(path: str, body: bytes = BODY, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    ).encode() + body


def _read_all(tls: ssl.SSLSocket) -> bytes:
    out = b""
    while True:
        try:
            chunk = tls.recv(65536)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError, ConnectionResetError):
            break
        if not chunk:
            break
        out += chunk
    return out


def _handshake_and_call(port: int, ctx: ssl.SSLContext) -> bytes:
    sock, rest = _connect_head(port)
    assert rest == b""
    with ctx.wrap_socket(sock, server_hostname=HOST) as tls:  # the ClientHello goes right after the 200
        tls.sendall(_request("/v1/chat/completions"))
        return _read_all(tls)


def _bio_call(port: int, ctx: ssl.SSLContext) -> bytes:
    """The ClientHello in the CONNECT's own write, then the call: TLS over memory BIOs."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=HOST)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    sock, rest = _connect_head(port, outgoing.read())
    with sock:
        incoming.write(rest)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                chunk = sock.recv(65536)
                assert chunk, "the daemon closed the connection during the handshake"
                incoming.write(chunk)
        tls.write(_request("/v1/chat/completions"))
        sock.sendall(outgoing.read())
        answer = b""
        while True:
            try:
                data = tls.read(65536)
                if not data:
                    break
                answer += data
                continue
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            incoming.write(chunk)
        return answer


def _calls(db: Path) -> list[dict]:
    store = open_db(db)
    try:
        return list_calls(store, limit=1000)
    finally:
        store.conn.close()


def _no_traceback(tmp_path: Path) -> None:
    text = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in text, text[-3000:]


def test_forty_handshakes_back_to_back_and_pipelined_hellos_all_succeed_and_are_recorded(tmp_path, sim):
    sim.state().set_script([{"text": "through the tunnel"}] * 60)
    with running_serve(tmp_path, "--upstream", f"openai={sim.url}") as (_proc, base):
        port = _port(base)
        subprocess.run(
            [str(CTXSCOPE), "ca", "path"],
            env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
            check=True,
            capture_output=True,
            timeout=60,
        )
        ctx = ssl.create_default_context(cafile=str(_bundle(tmp_path)))
        failures = []
        for i in range(40):
            try:
                answer = _handshake_and_call(port, ctx)
                assert answer.startswith(b"HTTP/1.1 200") and b"through the tunnel" in answer, answer[:300]
            except (OSError, AssertionError) as exc:
                failures.append(f"{i}: {exc!r}"[:200])
        for i in range(5):  # the ClientHello in the same write as the CONNECT
            try:
                answer = _bio_call(port, ctx)
                assert answer.startswith(b"HTTP/1.1 200") and b"through the tunnel" in answer, answer[:300]
            except (OSError, AssertionError) as exc:
                failures.append(f"pipelined {i}: {exc!r}"[:200])
        assert failures == []
        # The SDK, with its own proxy setting and the bundle as its trust store.
        with (
            httpx2.Client(proxy=base, verify=ssl.create_default_context(cafile=str(_bundle(tmp_path)))) as http,
            openai.OpenAI(api_key=KEY, max_retries=0, http_client=http) as sdk,
        ):
            for _ in range(5):
                got = sdk.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
                assert got.choices[0].message.content == "through the tunnel"
    rows = _calls(tmp_path / "c.db")
    assert len(rows) == 50
    assert {(r["provider"], r["path"], r["outcome"]) for r in rows} == {("openai", "/v1/chat/completions", "ok")}
    _no_traceback(tmp_path)


def test_inside_a_tunnel_slow_headers_idle_and_hostile_requests_are_cut_without_traceback(tmp_path, sim):
    sim.state().set_script([{"text": "ok"}] * 5)
    with running_serve(
        tmp_path, "--upstream", f"openai={sim.url}", "--limit", "header_timeout=2", "--limit", "keepalive_timeout=2"
    ) as (_proc, base):
        port = _port(base)
        subprocess.run(
            [str(CTXSCOPE), "ca", "path"],
            env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
            check=True,
            capture_output=True,
            timeout=60,
        )
        ctx = ssl.create_default_context(cafile=str(_bundle(tmp_path)))

        # A request head sent one byte every 0.5 s inside the tunnel: cut after header_timeout.
        sock, _ = _connect_head(port)
        with ctx.wrap_socket(sock, server_hostname=HOST) as tls:
            started, head = time.monotonic(), b"POST /v1/chat/completions HTTP/1.1\r\nX-Slow: " + b"a" * 100
            closed_after = None
            for byte in head:
                try:
                    tls.sendall(bytes([byte]))
                    tls.settimeout(0.5)
                    if tls.recv(1024) == b"":
                        closed_after = time.monotonic() - started
                        break
                except TimeoutError:
                    continue
                except (ssl.SSLError, OSError):
                    closed_after = time.monotonic() - started
                    break
            assert closed_after is not None and closed_after < 5, closed_after

        # A tunnel whose client never sends a ClientHello: closed after header_timeout.
        sock, _ = _connect_head(port)
        with sock:
            sock.settimeout(6)
            started = time.monotonic()
            assert sock.recv(1024) == b""
            assert time.monotonic() - started < 5

        # Not TLS at all after the 200: closed, one line in the log.
        sock, _ = _connect_head(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        with sock:
            sock.settimeout(6)
            data = b""
            while chunk := sock.recv(1024):  # a TLS alert at most, then the close
                data += chunk
            assert not data.startswith(b"HTTP/"), data

        # Hostile request targets inside the tunnel are answered 400, then the tunnel stays usable.
        for target in ("http://x:99999999/v1/models", "*", "//evil.example/v1/models"):
            sock, _ = _connect_head(port)
            with ctx.wrap_socket(sock, server_hostname=HOST) as tls:
                tls.sendall(f"GET {target} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
                answer = _read_all(tls)
                assert answer.split(b" ", 2)[1] in (b"400", b"404"), (target, answer[:200])

        # Idle inside the tunnel after one call: closed after keepalive_timeout.
        sock, _ = _connect_head(port)
        with ctx.wrap_socket(sock, server_hostname=HOST) as tls:
            tls.sendall(_request("/v1/chat/completions", extra="").replace(b"Connection: close", b"X-A: b"))
            tls.settimeout(10)
            first = tls.recv(65536)
            assert first.startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            while True:
                try:
                    if not tls.recv(65536):
                        break
                except (ssl.SSLError, OSError):
                    break
            assert time.monotonic() - started < 6
    _no_traceback(tmp_path)


def test_a_ca_rotated_under_a_running_daemon_is_the_one_it_serves(tmp_path, sim):
    sim.state().set_script([{"text": "ok"}] * 5)
    env = dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home"))
    with running_serve(tmp_path, "--upstream", f"openai={sim.url}") as (_proc, base):
        port = _port(base)
        subprocess.run([str(CTXSCOPE), "ca", "path"], env=env, check=True, capture_output=True, timeout=60)
        old = ssl.create_default_context(cafile=str(_bundle(tmp_path)))
        assert _handshake_and_call(port, old).startswith(b"HTTP/1.1 200")
        for name in ("ca.pem", "ca-key.pem"):  # the rotation the README describes
            (tmp_path / "home" / "ca" / name).unlink()
        subprocess.run([str(CTXSCOPE), "ca", "path"], env=env, check=True, capture_output=True, timeout=60)
        new = ssl.create_default_context(cafile=str(_bundle(tmp_path)))
        assert _handshake_and_call(port, new).startswith(b"HTTP/1.1 200")
        sock, _ = _connect_head(port)
        with sock:
            try:
                old.wrap_socket(sock, server_hostname=HOST).close()
                raise AssertionError("the old CA is still trusted for the new certificates")
            except ssl.SSLCertVerificationError:
                pass
    _no_traceback(tmp_path)


def _stream_through_tunnel(base: str, bundle: Path, got: list[str]) -> threading.Thread:
    def read() -> None:
        with (
            httpx2.Client(proxy=base, verify=ssl.create_default_context(cafile=str(bundle)), timeout=60) as http,
            openai.OpenAI(api_key=KEY, max_retries=0, http_client=http) as sdk,
        ):
            try:
                stream = sdk.chat.completions.create(
                    model="gpt-5", stream=True, messages=[{"role": "user", "content": "go"}]
                )
                got.extend(c.choices[0].delta.content or "" for c in stream if c.choices)
                got.append("[END]")
            except (openai.APIError, httpx2.HTTPError) as exc:
                got.append(f"[CUT] {exc!r}")

    thread = threading.Thread(target=read)
    thread.start()
    return thread


@pytest.mark.parametrize(("grace", "outcome"), [("30", "ok"), ("0.3", "interrupted")])
def test_a_stream_in_a_tunnel_when_the_daemon_stops_is_ok_when_whole_and_interrupted_when_cut(
    tmp_path, sim, grace, outcome
):
    """SIGTERM mid-stream: within the grace the intercepted stream ends whole and is `ok`; past it the
    daemon cuts it and says so (`interrupted`), never that the client left."""
    words = " ".join(f"w{i}" for i in range(36))  # 12 chunks, 250 ms apart: 3 s
    sim.state().set_script([{"text": words, "chunk_delay_ms": 250}])
    got: list[str] = []
    with running_serve(tmp_path, "--upstream", f"openai={sim.url}", "--limit", f"shutdown_grace={grace}") as (
        proc,
        base,
    ):
        subprocess.run(
            [str(CTXSCOPE), "ca", "path"],
            env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
            check=True,
            capture_output=True,
            timeout=60,
        )
        reader = _stream_through_tunnel(base, _bundle(tmp_path), got)
        time.sleep(1.0)  # mid-stream
        proc.send_signal(signal.SIGTERM)
        reader.join(60)
    rows = _calls(tmp_path / "c.db")
    assert [(r["path"], r["outcome"]) for r in rows] == [("/v1/chat/completions", outcome)], (got, rows)
    assert (got[-1] == "[END]") == (outcome == "ok"), got
    _no_traceback(tmp_path)
