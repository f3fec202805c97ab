"""Blind CONNECT tunnels attacked the way the security probe did, against the installed
`ctxscope serve` (uvloop) in a process of its own: hundreds of tunnels closed normally, tunnels
over max_connections, an idle tunnel, bytes pushed while the target's connect is pending, and a
stop with tunnels open. All traffic stays on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from support.serve_process import running_serve


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


@contextlib.contextmanager
def _echo_server() -> Iterator[int]:
    """A loopback server that echoes every connection until the client half-closes, then closes."""
    server = socket.create_server(("127.0.0.1", 0), backlog=128)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()
        thread.join(5)


def _tunnel(port: int, target: str, payload: bytes = b"") -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + payload)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return sock, got


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _settled_fds(pid: int, wanted: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    count = _fds(pid)
    while count > wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        count = _fds(pid)
    return count


def _no_traceback(tmp_path: Path) -> None:
    text = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in text, text[-3000:]


def test_four_hundred_tunnels_closed_normally_leave_no_descriptor(tmp_path):
    with _echo_server() as echo, running_serve(tmp_path) as (proc, base):
        port, target = _port(base), f"127.0.0.1:{echo}"
        sock, head = _tunnel(port, target)  # a first one: whatever the first tunnel sets up is not a leak
        sock.close()
        before = _settled_fds(proc.pid, 0, 1.0)
        for i in range(400):
            sock, head = _tunnel(port, target)
            with sock:
                assert head.startswith(b"HTTP/1.1 200"), head
                sock.sendall(b"ping %d" % i)
                assert sock.recv(64) == b"ping %d" % i
                sock.shutdown(socket.SHUT_WR)  # both sides close normally: EOF each way
                assert sock.recv(64) == b""
        after = _settled_fds(proc.pid, before + 20)
        assert after - before <= 20, f"fd count {before} -> {after} after 400 tunnels"
        # Closed by reset and by a client that leaves mid-tunnel: released too.
        for _ in range(50):
            sock, head = _tunnel(port, target)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        assert _settled_fds(proc.pid, before + 20) - before <= 20
    _no_traceback(tmp_path)


def test_tunnels_count_against_max_connections_and_the_stop_closes_them(tmp_path):
    with _echo_server() as echo, running_serve(tmp_path, "--limit", "max_connections=8") as (_proc, base):
        port, target = _port(base), f"127.0.0.1:{echo}"
        held = []
        for _ in range(8):
            sock, head = _tunnel(port, target)
            held.append(sock)
            assert head.startswith(b"HTTP/1.1 200"), head
        sock, head = _tunnel(port, target)
        with sock:
            assert head.startswith(b"HTTP/1.1 503"), head
        # A direct request is refused as well: the tunnels hold every slot.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as direct:
            direct.sendall(b"GET /_ctxscope/api/status?store=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert direct.recv(64).startswith(b"HTTP/1.1 503")
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the slot is free again once the daemon has seen the close
            sock, head = _tunnel(port, target)
            if head.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            sock.close()
            time.sleep(0.1)
        held.append(sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        # The daemon is stopped with 8 tunnels open: running_serve wants exit 0; the tunnels end.
    for sock in held:
        with sock:
            sock.settimeout(5)
            assert sock.recv(64) == b""
    _no_traceback(tmp_path)


def test_an_idle_tunnel_is_closed_after_the_idle_timeout(tmp_path):
    with _echo_server() as echo, running_serve(tmp_path, "--limit", "tunnel_idle_timeout=1.5") as (_proc, base):
        sock, head = _tunnel(_port(base), f"127.0.0.1:{echo}")
        with sock:
            assert head.startswith(b"HTTP/1.1 200")
            for _ in range(4):  # traffic keeps it open past the timeout
                time.sleep(0.6)
                sock.sendall(b"x")
                assert sock.recv(8) == b"x"
            started = time.monotonic()
            sock.settimeout(10)
            assert sock.recv(8) == b""
            idle = time.monotonic() - started
            assert 1.0 < idle < 4.0, idle
    _no_traceback(tmp_path)


@contextlib.contextmanager
def _never_accepting() -> Iterator[int]:
    """A loopback port whose accept queue is full: a connect to it stays pending (its SYN dropped)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the queue; later SYNs are dropped
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_bytes_pushed_while_the_connect_is_pending_are_bounded(tmp_path):
    with _never_accepting() as blackhole, running_serve(tmp_path) as (_proc, base):
        sock = socket.create_connection(("127.0.0.1", _port(base)), timeout=10)
        with sock:
            sock.sendall(f"CONNECT 127.0.0.1:{blackhole} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            sock.settimeout(3)
            chunk, sent = b"z" * (1 << 20), 0
            try:
                while sent < 256 << 20:
                    sent += sock.send(chunk)
            except TimeoutError:
                pass
            # What the kernel buffers on both sides plus the tunnel's small bound: a few MB at most.
            assert sent < 32 << 20, f"{sent >> 20} MiB accepted while the connect was pending"
    _no_traceback(tmp_path)
