"""Abuse cases against the forward proxy (CONNECT on the daemon's port): the TLS handshake race,
descriptors left by closed tunnels, tunnels over max_connections, idle and trickling tunnels, bytes
pushed while a tunnel's connect is pending, and the CA's bundle after a rotation.

The socket work is plain blocking sockets in a thread (``asyncio.to_thread``): a client as the
probe wrote it, with no library between it and the bytes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from abuse_ctx import LABEL_HEADER, Ctx, Result, label, tagged
from abuse_procs import CTXSCOPE, RssSampler, env_for, start_daemon, stop_daemon

HOST = "api.openai.com"  # intercepted: the bench's openai upstream is the background's fast one
MB = 1 << 20
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def _connect_head(port: int, target: str, payload: bytes = b"") -> tuple[socket.socket, bytes, bytes]:
    """CONNECT (with ``payload`` in the same write): the socket, the answer's head, what followed it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + payload)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return sock, head, rest


def _call(tag: str) -> bytes:
    path = tagged("/v1/chat/completions", tag)
    return (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"{LABEL_HEADER}: {label(tag)}\r\nContent-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    ).encode() + BODY


def _read_to_end(read) -> bytes:
    out = b""
    while True:
        try:
            chunk = read()
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError, ConnectionResetError):
            break
        if not chunk:
            break
        out += chunk
    return out


def _handshake_call(port: int, ctx: ssl.SSLContext, tag: str) -> bytes:
    sock, head, _ = _connect_head(port, f"{HOST}:443")
    if not head.startswith(b"HTTP/1.1 200"):
        sock.close()
        return head
    with ctx.wrap_socket(sock, server_hostname=HOST) as tls:
        tls.sendall(_call(tag))
        return _read_to_end(lambda: tls.recv(65536))


def _pipelined_call(port: int, ctx: ssl.SSLContext, tag: str) -> bytes:
    """The ClientHello in the CONNECT's own write (memory BIOs)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=HOST)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    sock, head, rest = _connect_head(port, f"{HOST}:443", outgoing.read())
    with sock:
        if not head.startswith(b"HTTP/1.1 200"):
            return head
        incoming.write(rest)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                chunk = sock.recv(65536)
                if not chunk:
                    return b"closed during the handshake"
                incoming.write(chunk)
        tls.write(_call(tag))
        sock.sendall(outgoing.read())
        answer = b""
        while True:
            try:
                data = tls.read(65536)
            except ssl.SSLWantReadError:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                incoming.write(chunk)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not data:
                break
            answer += data
        return answer


def _ca_ready(ctx: Ctx) -> ssl.SSLContext:
    subprocess.run([CTXSCOPE, "ca", "path"], env=env_for(ctx.home), check=True, capture_output=True, timeout=60)
    return ssl.create_default_context(cafile=str(ctx.home / "ca" / "bundle.pem"))


async def tls_handshake_race(ctx: Ctx) -> Result:
    """40 intercepted TLS handshakes back to back, then 5 with the ClientHello in the CONNECT's write."""
    tls = await asyncio.to_thread(_ca_ready, ctx)
    failed: list[str] = []
    for i in range(45):
        tag = ctx.expect(f"t01-{i}")
        call = _handshake_call if i < 40 else _pipelined_call
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(call, ctx.port, tls, tag), 20)
            if not answer.startswith(b"HTTP/1.1 200"):
                failed.append(f"{i}: {answer[:60]!r}")
        except (OSError, TimeoutError) as exc:
            failed.append(f"{i}: {exc!r}"[:100])
    if failed:
        ctx.expected -= {f"t01-{i.split(':')[0]}" for i in failed}  # their loss is this case's failure
    return Result(
        not failed,
        f"{45 - len(failed)} of 45 answered 200 (40 back to back, 5 pipelined)"
        + (f"; failed: {'; '.join(failed[:5])}" if failed else ""),
    )


@contextlib.contextmanager
def _echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0), backlog=256)

    def one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        thread.join(5)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _tunnels_closed_normally(port: int, pid: int, n: int) -> tuple[int, int, int]:
    with _echo() as echo:
        ok = 0
        before = _fds(pid)
        for i in range(n):
            sock, head, _ = _connect_head(port, f"127.0.0.1:{echo}")
            with sock:
                if head.startswith(b"HTTP/1.1 200"):
                    sock.sendall(b"%d" % i)
                    ok += sock.recv(16) == b"%d" % i
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(16)
        deadline = time.monotonic() + 5
        while _fds(pid) > before + 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        return ok, before, _fds(pid)


async def tunnel_fd_leak(ctx: Ctx) -> Result:
    """400 blind tunnels that both sides close normally: the daemon's descriptors come back."""
    ok, before, after = await asyncio.to_thread(_tunnels_closed_normally, ctx.port, ctx.daemon.pid, 400)
    return Result(
        ok == 400 and after - before <= 20,
        f"{ok}/400 tunnels echoed; daemon fds {before} -> {after} (+{after - before}, limit +20)",
    )


def _fill(port: int, target: str, most: int) -> tuple[int, bool, list[socket.socket]]:
    held: list[socket.socket] = []
    refused = False
    for _ in range(most):
        sock, head, _ = _connect_head(port, target)
        if head.startswith(b"HTTP/1.1 503"):
            sock.close()
            refused = True
            break
        held.append(sock)
    return len(held), refused, held


async def tunnel_max_connections(ctx: Ctx) -> Result:
    """Tunnels opened until refused, against a daemon of its own with max_connections = 16."""
    config = ctx.work / "tunnels.toml"
    config.write_text("[limits]\nmax_connections = 16\n")
    daemon = await asyncio.to_thread(
        start_daemon, "tunnels", ctx.work, ctx.work / "home-tunnels", ctx.work / "data" / "tunnels.db", {}, config
    )
    ctx.others.append(daemon)
    try:
        with _echo() as echo:
            opened, refused, held = await asyncio.to_thread(_fill, daemon.port, f"127.0.0.1:{echo}", 200)
            for sock in held:
                sock.close()
        err = daemon.err_since(0)
    finally:
        await asyncio.to_thread(stop_daemon, daemon, 60)
    return Result(
        refused and opened <= 16 and "Traceback" not in err,
        f"{opened} tunnels opened before a 503 (limit 16); refused: {refused}",
    )


def _idle_and_trickle(
    port: int, ctx_tls: ssl.SSLContext, idle_limit: float, head_limit: float
) -> tuple[float | None, float | None]:
    with _echo() as echo:
        sock, _head, _ = _connect_head(port, f"127.0.0.1:{echo}")
        with sock:
            started = time.monotonic()
            sock.settimeout(idle_limit + 3)
            try:
                idle = time.monotonic() - started if sock.recv(16) == b"" else None
            except TimeoutError:
                idle = None
    sock, _head, _ = _connect_head(port, f"{HOST}:443")
    with ctx_tls.wrap_socket(sock, server_hostname=HOST) as tls:
        started, trickled = time.monotonic(), None
        tls.settimeout(0.5)
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nX-Slow: " + b"a" * 200:
            if time.monotonic() - started > head_limit + 5:
                break
            try:
                tls.sendall(bytes([byte]))
                if tls.recv(1024) == b"":
                    trickled = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                trickled = time.monotonic() - started
                break
    return idle, trickled


async def tunnel_idle_and_trickle(ctx: Ctx) -> Result:
    """An idle blind tunnel, and a request head sent one byte per 0.5 s inside an intercepted one."""
    tls = await asyncio.to_thread(_ca_ready, ctx)
    idle_limit, head_limit = ctx.limits.tunnel_idle_timeout, ctx.limits.header_timeout
    idle, trickled = await asyncio.to_thread(_idle_and_trickle, ctx.port, tls, idle_limit, head_limit)
    held = idle is not None and idle <= idle_limit + 1.5 and trickled is not None and trickled <= head_limit + 1.5
    shown = ["OPEN" if v is None else f"{v:.1f} s" for v in (idle, trickled)]
    return Result(
        held,
        f"idle tunnel closed after {shown[0]} (limit {idle_limit:g} s); trickled head inside "
        f"a tunnel closed after {shown[1]} (limit {head_limit:g} s)",
    )


@contextlib.contextmanager
def _blackhole() -> Iterator[int]:
    """A loopback port whose accept queue is full: a connect to it stays pending."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
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


def _push_pending(port: int, total: int, stuck_after: float) -> int:
    with _blackhole() as hole:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            sock.sendall(f"CONNECT 127.0.0.1:{hole} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            sock.settimeout(stuck_after)
            chunk, sent = b"z" * MB, 0
            with contextlib.suppress(TimeoutError, OSError):
                while sent < total:
                    sent += sock.send(chunk)
            return sent


async def pending_tunnel_500mb(ctx: Ctx) -> Result:
    """500 MB pushed into a tunnel whose target's connect never completes."""
    pid = ctx.daemon.pid
    before, t0 = RssSampler.now(pid), time.monotonic()
    sent = await asyncio.to_thread(_push_pending, ctx.port, 500 * MB, 5.0)
    await asyncio.sleep(0.5)
    own, _, _ = ctx.sampler.window(pid, t0, time.monotonic())
    growth = (max(own, RssSampler.now(pid).root_kb) - before.root_kb) / 1024
    return Result(
        growth < 100,
        f"{sent / MB:.1f} MB accepted before the client's writes blocked; daemon "
        f"{before.root_kb / 1024:.0f} MB -> peak {own / 1024:.0f} (+{growth:.0f}, limit +100)",
    )


def _rotate(home: Path) -> tuple[bool, bool, bool]:
    env = env_for(home)
    folder = home / "ca"
    subprocess.run([CTXSCOPE, "ca", "path"], env=env, check=True, capture_output=True, timeout=60)
    old = (folder / "ca.pem").read_bytes()
    for name in ("ca.pem", "ca-key.pem"):
        (folder / name).unlink()
    subprocess.run([CTXSCOPE, "ca", "path"], env=env, check=True, capture_output=True, timeout=60)
    new, bundle = (folder / "ca.pem").read_bytes(), (folder / "bundle.pem").read_bytes()
    (folder / "bundle.pem").write_bytes(b"planted\n")
    subprocess.run([CTXSCOPE, "ca", "env"], env=env, check=True, capture_output=True, timeout=60)
    replanted = (folder / "bundle.pem").read_bytes()
    return new in bundle, old not in bundle, new in replanted and b"planted" not in replanted


async def ca_rotation_bundle(ctx: Ctx) -> Result:
    """The CA rotated (its files removed, made again): the bundle trusts the new one, not the old."""
    has_new, lacks_old, replanted = await asyncio.to_thread(_rotate, ctx.work / "home-ca")
    return Result(
        has_new and lacks_old and replanted,
        f"bundle has the new CA: {has_new}; lacks the old: {lacks_old}; a planted bundle rebuilt: {replanted}",
    )
