"""The forward proxy: the real openai SDK with HTTPS_PROXY and the local CA trusted (from `ctxscope
ca env`) calls https://api.openai.com; the daemon intercepts it and sends it to the configured
upstream (the simulator), recording it byte-exact. Another host is tunnelled blind, unrecorded."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import openai
from click.testing import CliRunner

from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, list_calls, open_db
from ctxscope.main import cli

KEY = "sk-test-forward-0123456789abcdef"


def _echo_server() -> tuple[socket.socket, threading.Thread]:
    """A TCP server on loopback that echoes one connection: a host no upstream names."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def _connect(port: int, target: str) -> tuple[socket.socket, bytes]:
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += client.recv(1024)
    return client, head


def test_intercepted_call_is_recorded_and_other_hosts_are_tunnelled(proxy, sim, monkeypatch):
    port = int(proxy.url.rsplit(":", 1)[1])
    # A host that is not an upstream: tunnelled, bytes both ways, not recorded.
    server, thread = _echo_server()
    try:
        client, head = _connect(port, f"127.0.0.1:{server.getsockname()[1]}")
        with client:
            assert head.startswith(b"HTTP/1.1 200")
            client.sendall(b"hello through the tunnel")
            assert client.recv(1024) == b"hello through the tunnel"
    finally:
        server.close()
        thread.join(5)

    env = CliRunner().invoke(cli, ["ca", "env", "--daemon", f"http://127.0.0.1:{port}"])
    assert env.exit_code == 0, env.output
    variables = dict(line.removeprefix("export ").split("=", 1) for line in env.output.splitlines())
    assert set(variables) >= {
        "HTTPS_PROXY",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "CODEX_CA_CERTIFICATE",
    }
    ca_path = Path(CliRunner().invoke(cli, ["ca", "path"]).output.strip())
    assert ca_path.is_file() and variables["NODE_EXTRA_CA_CERTS"] == str(ca_path)
    assert stat.S_IMODE(os.stat(ca_path.parent / "ca-key.pem").st_mode) == 0o600
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    sim.state().set_script([{"text": "Answered behind the proxy."}])
    with openai.OpenAI(api_key=KEY, max_retries=0) as sdk:  # the real host: https://api.openai.com/v1
        answer = sdk.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Answered behind the proxy."

    [row] = proxy.wait_for_calls(1)  # the tunnel left nothing behind
    assert (row["provider"], row["path"], row["api"], row["outcome"]) == (
        "openai",
        "/v1/chat/completions",
        "openai.chat",
        "ok",
    )
    db = open_db(proxy.db_path)
    try:
        assert get_response_raw(db, row["id"]) == bytes(sim.written[-1])
        sent = json.loads(get_request_raw(db, row["id"]))
        assert sent == {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
        assert len(list_calls(db, limit=10)) == 1
    finally:
        db.conn.close()


async def _sniffing(proxy) -> int:
    from ctxscope.proxy.server import CONNECT_KEY

    return len(proxy.daemon.runner.app[CONNECT_KEY].sniffed)


def test_a_silent_connection_is_closed_when_the_daemon_stops(proxy):
    """A connection the daemon accepted but that has sent nothing yet (its first bytes would say
    whether it is a CONNECT or HTTP) is neither aiohttp's nor a tunnel: the stop closes it too,
    instead of leaving its socket to the garbage collector."""
    port = int(proxy.url.rsplit(":", 1)[1])
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        deadline = time.monotonic() + 10
        while proxy.loop_thread.call(_sniffing(proxy)) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)  # until the daemon has accepted it
        proxy.stop()
        assert silent.recv(1) == b""  # closed by the daemon, not left open
    finally:
        silent.close()
