"""Abuse cases against where keys go: the UI's replay with a Host naming a listener, the launcher
facing an impostor on its port, imported files that name a host or are bombs, and the home's mode.
Every trap is a real listener on a loopback address that records what it receives."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

from abuse_ctx import Ctx, Result, read_calls
from abuse_procs import CTXSCOPE, start_daemon, stop_daemon

if sys.version_info >= (3, 14):  # the standard library's from 3.14, as the store imports it
    from compression import zstd
else:
    from backports import zstd

MESSAGES = {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


class Trap:
    """A TCP listener that records every byte it gets and answers one fixed HTTP response."""

    def __init__(self, host: str, answer: dict):
        self.host, self.answer, self.received = host, json.dumps(answer).encode(), b""

    async def __aenter__(self) -> Trap:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                self.received += await asyncio.wait_for(reader.read(65536), 5)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(self.answer), self.answer)
                )
                await writer.drain()
            except (OSError, TimeoutError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


async def replay_host_key(ctx: Ctx) -> Result:
    """With the page's token, POST the replay with Host naming a listener on 127.0.0.2."""
    key = "sk-ant-api03-DAEMONKEY-" + secrets.token_hex(16)
    home, db = ctx.work / "keys-home", ctx.work / "keys.db"
    os.environ["ANTHROPIC_API_KEY"] = key  # the daemon's environment: its key for replays
    try:
        daemon = await asyncio.to_thread(start_daemon, "keys", ctx.work, home, db, {}, None)
    finally:
        del os.environ["ANTHROPIC_API_KEY"]
    ctx.others.append(daemon)
    try:
        async with Trap("127.0.0.2", {"ok": True}) as trap:
            st, _, _ = await ctx.http(
                "POST",
                "/u/sim/v1/messages",
                body=json.dumps(MESSAGES).encode(),
                headers={
                    "x-api-key": "sk-ant-client-" + secrets.token_hex(8),
                    "anthropic-version": "2023-06-01",
                    "Content-Type": "application/json",
                },
                base=daemon.url,
            )
            rows: list[dict] = []
            for _ in range(120):
                rows = await asyncio.to_thread(read_calls, db) if db.exists() else []
                if rows:
                    break
                await asyncio.sleep(0.25)
            if not rows:
                return Result(False, f"the first call ({st}) was not stored")
            host = {"Host": f"127.0.0.2:{trap.port}"}
            _, _, page = await ctx.http("GET", "/", headers=host, base=daemon.url)
            token = re.search(rb'name="ctxscope-token" content="([0-9a-f]+)"', page)
            if token is None:
                return Result(False, "no token in the page")
            post = host | {"X-Ctxscope-Token": token.group(1).decode(), "Content-Type": "application/json"}
            st, _, _ = await ctx.http(
                "POST",
                f"/_ctxscope/api/replay?id={rows[0]['id']}",
                body=b"{}",
                headers=post,
                base=daemon.url,
                timeout=60,
            )
            got = trap.received
    finally:
        await asyncio.to_thread(stop_daemon, daemon)
    leaked = key.encode() in got
    return Result(
        not got and st == 200,
        f"replay answered {st}; the listener got {len(got)} bytes" + (" WITH THE DAEMON'S KEY" if leaked else ""),
    )


async def launcher_impostor(ctx: Ctx) -> Result:
    """A listener on the launcher's port answers {"writer": null}: the command must not run."""
    marker, key = ctx.work / "impostor-ran", "sk-ant-client-" + secrets.token_hex(16)
    child = (
        f"import os, urllib.request; open({str(marker)!r}, 'w').close(); urllib.request.urlopen("
        "urllib.request.Request(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', data=b'{}', "
        "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY']}), timeout=10)"
    )
    async with Trap("127.0.0.1", {"writer": None}) as trap:
        env = {**os.environ, "CTXSCOPE_HOME": str(ctx.home), "ANTHROPIC_API_KEY": key}
        done = await asyncio.to_thread(
            subprocess.run,
            [CTXSCOPE, "run", "--port", str(trap.port), "--", sys.executable, "-c", child],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    held = done.returncode != 0 and not marker.exists() and key.encode() not in trap.received
    return Result(
        held,
        f"run exited {done.returncode}, command ran: {marker.exists()}, "
        f"key at the listener: {key.encode() in trap.received}; {done.stderr.strip()[:160]}",
    )


async def import_foreign_host(ctx: Ctx) -> Result:
    """A HAR for evilanthropic.com: `curl` must send the key through the daemon's /anthropic route."""
    har = ctx.work / "evil.har"
    har.write_text(
        json.dumps(
            {
                "log": {
                    "entries": [
                        {
                            "startedDateTime": "2026-01-02T03:04:05Z",
                            "request": {
                                "method": "POST",
                                "url": "https://evilanthropic.com/v1/messages",
                                "headers": [],
                                "postData": {"text": json.dumps(MESSAGES)},
                            },
                            "response": {"status": 200, "content": {"text": "{}"}},
                        }
                    ]
                }
            }
        )
    )
    db, env = ctx.work / "evil.db", {**os.environ, "CTXSCOPE_HOME": str(ctx.home)}
    run = [CTXSCOPE, "import", str(har), "--db", str(db)]
    done = await asyncio.to_thread(subprocess.run, run, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return Result(False, f"import failed: {done.stderr.strip()[:160]}")
    [row] = await asyncio.to_thread(read_calls, db)
    curl = [CTXSCOPE, "curl", row["id"], "--db", str(db)]
    done = await asyncio.to_thread(subprocess.run, curl, env=env, capture_output=True, text=True, timeout=60)
    held = "evilanthropic" not in done.stdout and "/anthropic/v1/messages" in done.stdout
    url = next((w for w in done.stdout.split() if w.startswith("http")), "(none)")
    return Result(held, f"curl targets {url}")


def _bomb(path: Path) -> None:
    compressor = zstd.ZstdCompressor(level=19)
    parts = [compressor.compress(b'{"format":"ctxscope-bundle","version":1}\n{"exchange":"')]
    parts += [compressor.compress(b"A" * (16 << 20)) for _ in range(64)]  # one line of 1 GiB
    path.write_bytes(b"".join(parts) + compressor.flush())


async def import_zstd_bomb(ctx: Ctx) -> Result:
    """A ~32 KB zstd bundle that decodes to 1 GiB in one line: peak RSS and a one-line error."""
    bomb = ctx.work / "bomb.ctxscope"
    await asyncio.to_thread(_bomb, bomb)
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(done.stderr)\n"
    )
    env = {**os.environ, "CTXSCOPE_HOME": str(ctx.home)}
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", probe, CTXSCOPE, "import", str(bomb), "--db", str(ctx.work / "bomb.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, kb = (int(v) for v in out.stdout.split())
    one_line = len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    held = code == 1 and one_line and kb < 300 * 1024
    return Result(
        held, f"{bomb.stat().st_size} bytes: exit {code}, peak RSS {kb / 1024:.0f} MB, {out.stderr.strip()[-90:]}"
    )


async def home_mode(ctx: Ctx) -> Result:
    """`ca path` with a missing $CTXSCOPE_HOME under umask 022."""
    home = ctx.work / "fresh-home" / "home"
    env = {**os.environ, "CTXSCOPE_HOME": str(home)}
    done = await asyncio.to_thread(
        subprocess.run,
        [CTXSCOPE, "ca", "path"],
        env=env,
        capture_output=True,
        timeout=60,
        preexec_fn=lambda: os.umask(0o022),
    )
    mode = stat.S_IMODE(home.stat().st_mode) if home.exists() else None
    return Result(done.returncode == 0 and mode == 0o700, f"home created {oct(mode) if mode is not None else 'not'}")
