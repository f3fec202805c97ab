"""Abuse cases on who may use the daemon: remote mode without its key, a rebound Host and a cross-site
page on provider routes and the WebSocket relay, terminal escapes in a session label, and an OTLP
collector answering with a huge error body."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import threading
from pathlib import Path

import aiohttp
from abuse_ctx import Ctx, Result, count_tag, label, tagged, wait_stored
from abuse_procs import CTXSCOPE, env_for, start_daemon, stop_daemon

JSON = {"Content-Type": "application/json"}
CHAT = "/u/sim/v1/chat/completions"
BODY = json.dumps({"model": "gpt-sim", "messages": [{"role": "user", "content": "hello"}]}).encode()
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"


async def _own_daemon(ctx: Ctx, name: str, config_text: str):
    config = ctx.work / f"{name}.toml"
    config.write_text(config_text)
    daemon = await asyncio.to_thread(
        start_daemon,
        name,
        ctx.work,
        ctx.work / f"home-{name}",
        ctx.work / f"{name}.db",
        {"fast": ctx.bg.upstream},
        config,
    )
    ctx.others.append(daemon)
    return daemon


async def remote_without_key(ctx: Ctx) -> Result:
    """A daemon bound with allow_remote: a peer asks for the page (and its write token) and the API."""
    daemon = await _own_daemon(ctx, "remote", "allow_remote = true\n")
    try:
        page, _, body = await ctx.http("GET", "/", base=daemon.url)
        api, _, _ = await ctx.http("GET", "/_ctxscope/api/sessions", base=daemon.url)
        found = re.search(r"need this key[^:]*: (\S+)", daemon.out.read_text())
        key = found.group(1) if found else ""
        keyed, _, _ = await ctx.http("GET", "/_ctxscope/api/sessions", base=daemon.url, headers={"X-Ctxscope-Key": key})
    finally:
        await asyncio.to_thread(stop_daemon, daemon, 20)
    held = page == 401 and api == 401 and b"Token" not in body and keyed == 200
    return Result(
        held,
        f"no key: page {page}, API {api}; the printed key: API {keyed}"
        + ("" if found else "; NO KEY PRINTED at start"),
    )


async def rebinding_provider_route(ctx: Ctx) -> Result:
    """A rebound name posts to a provider route and opens a socket on one; neither may be forwarded."""
    tag = "r01"
    st, _, body = await ctx.http(
        "POST", tagged("/s/" + label(tag) + CHAT, tag), body=BODY, headers=JSON | {"Host": f"evil.example:{ctx.port}"}
    )
    ws = await _upgrade(
        ctx.url.replace("http", "ws") + "/s/" + label(tag) + "/u/sim/v1/responses", {"Host": f"evil.example:{ctx.port}"}
    )
    legit = ctx.expect("r01-legit")
    ok, _, _ = await ctx.http("POST", tagged(CHAT, legit), body=BODY, headers=JSON)
    await wait_stored(ctx.db, legit, 30)
    recorded = await asyncio.to_thread(count_tag, ctx.db, tag)
    held = st == 403 and ws == 403 and ok == 200 and recorded == 0
    return Result(held, f"HTTP answered {st} ({body[:60]!r}), upgrade {ws}, recorded {recorded}; legit call {ok}")


async def cross_site_simple_post(ctx: Ctx) -> Result:
    """A page on another site sends a text/plain POST (no preflight) and a socket into a session."""
    tag = "x01"
    page = {
        "Content-Type": "text/plain;charset=UTF-8",
        "Origin": "https://evil.example",
        "Sec-Fetch-Site": "cross-site",
    }
    st, _, _ = await ctx.http("POST", tagged("/s/" + label(tag) + CHAT, tag), body=BODY, headers=page)
    ws = await _upgrade(
        ctx.url.replace("http", "ws") + "/s/" + label(tag) + "/u/sim/v1/responses", {"Origin": "https://evil.example"}
    )
    legit = ctx.expect("x01-legit")
    ok, _, _ = await ctx.http("POST", tagged(CHAT, legit), body=BODY, headers=JSON)
    await wait_stored(ctx.db, legit, 30)
    recorded = await asyncio.to_thread(count_tag, ctx.db, tag)
    held = st == 403 and ws == 403 and ok == 200 and recorded == 0
    return Result(held, f"simple POST answered {st}, socket {ws}, recorded {recorded}; SDK-like call {ok}")


async def _upgrade(url: str, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(ws_close=5)) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def escape_label(ctx: Ctx) -> Result:
    """A label carrying OSC 52 (writes the clipboard), then `ctxscope show/session/sessions` print it."""
    tag = ctx.expect("e01")
    st, _, _ = await ctx.http("POST", tagged("/s/abuse-e01%1B%5D52%3Bc%3BcmVt%07" + CHAT, tag), body=BODY, headers=JSON)
    await asyncio.to_thread(_raw_header, ctx.port)  # ESC in a session header: refused, and logged
    if st != 200 or not await wait_stored(ctx.db, tag, 30):
        return Result(False, f"the labelled call answered {st} or was not stored")
    env = env_for(ctx.home)
    found: list[str] = []
    for args in (["sessions"], ["session", "abuse-e01"], ["calls", "--session", "abuse-e01"], ["sessions", "--json"]):
        done = await asyncio.to_thread(
            subprocess.run, [CTXSCOPE, *args, "--db", str(ctx.db)], capture_output=True, env=env, timeout=60
        )
        if b"\x1b" in done.stdout + done.stderr or b"\x07" in done.stdout + done.stderr:
            found.append(args[0])
    log = ctx.daemon.err.read_bytes()
    if b"\x1b" in log:
        found.append("the daemon's log")
    return Result(not found, "no ESC reached the terminal" if not found else f"ESC printed by {', '.join(found)}")


def _raw_header(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(
            b"POST "
            + CHAT.encode()
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ctxscope-session: "
            + OSC52.encode()
            + b"\r\nContent-Length: 2\r\n\r\n{}"
        )
        raw.recv(200)


HUGE = 300 * 1024 * 1024


def _collector(listener: socket.socket, seen: dict[str, int], stop: threading.Event) -> None:
    """Answers every export with a 400 and a 300 MB body, counting requests and bytes sent."""
    listener.settimeout(0.2)
    chunk = b"x" * (1 << 20)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(10)
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < length:
                    body += conn.recv(65536)
                seen["requests"] += 1
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: " + str(HUGE).encode() + b"\r\n\r\n")
                for _ in range(HUGE >> 20):
                    conn.sendall(chunk)
                    seen["sent"] += len(chunk)
            except (OSError, AttributeError):
                pass


def _peak_mb(pid: int) -> float:
    return int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) / 1024


async def otlp_huge_error_body(ctx: Ctx) -> Result:
    """An OTLP collector answers 400 with a 300 MB body: the daemon must not read it all."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen, stop = {"requests": 0, "sent": 0}, threading.Event()
    thread = threading.Thread(target=_collector, args=(listener, seen, stop), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    daemon = await _own_daemon(ctx, "otlp", f'[export]\notlp_endpoint = "{url}"\n')
    try:
        st, _, _ = await ctx.http("POST", CHAT, body=BODY, headers=JSON, base=daemon.url)
        before = _peak_mb(daemon.proc.pid)
        for _ in range(300):
            if seen["requests"] >= 2:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        grown = _peak_mb(daemon.proc.pid) - before
    finally:
        await asyncio.to_thread(stop_daemon, daemon, 30)
        stop.set()
        thread.join(10)
        listener.close()
    traceback = "Traceback" in daemon.err.read_text(errors="replace")
    held = st == 200 and seen["requests"] >= 1 and grown < 100 and not traceback
    return Result(
        held,
        f"{seen['requests']} export attempts, collector sent {seen['sent'] >> 20} MB, daemon peak "
        f"+{grown:.0f} MB" + ("; TRACEBACK in its log" if traceback else ""),
    )
