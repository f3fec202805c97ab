"""Abuse cases about honest records: clients that leave, upstreams that reset, and a full disk."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import time

import abuse_wire as wire
import aiohttp
from abuse_ctx import LABEL_HEADER, Ctx, Result, count_tag, label, read_calls, row_tag, tagged, wait_stored
from abuse_procs import CTXSCOPE, env_for, start_daemon, stop_daemon
from yarl import URL

CHAT = "/v1/chat/completions"


def _chat_body(stream: bool) -> bytes:
    return json.dumps({"model": "gpt-x", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}).encode()


def _outcome(tag: str, wanted: str):
    return lambda stored: stored.outcome(tag, wanted)


async def client_leaves_silent_upstream(ctx: Ctx) -> Result:
    """The client gives up after 0.5 s on an upstream that thinks for 30 s (not streamed)."""
    tag, body, n0 = "c12", _chat_body(False), len(ctx.up.silent)
    _reader, writer = await wire.connect(ctx.port)
    writer.write(
        wire.head(
            "POST",
            tagged(f"/u/silent{CHAT}", tag),
            ctx.port,
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), (LABEL_HEADER, label(tag))],
        )
        + body
    )
    await asyncio.sleep(0.5)
    wire.close(writer)
    t_close = time.monotonic()
    conn = None
    while time.monotonic() < t_close + 3:
        conn = next((c for c in ctx.up.silent[n0:] if f"call={tag}" in c.request_line), None)
        if conn is not None and conn.t_closed is not None:
            break
        await asyncio.sleep(0.02)
    if conn is None:
        return Result(False, "the upstream never got the request", _outcome(tag, "client_disconnected"))
    if conn.t_closed is None:
        detail, held = "upstream connection STILL OPEN 3 s after the client left", False
    else:
        gap = conn.t_closed - t_close
        detail, held = f"upstream connection closed {gap * 1000:.0f} ms after the client left (limit 1000)", gap <= 1.0
    return Result(held, detail, _outcome(tag, "client_disconnected"))


async def reset_close_delimited(ctx: Ctx) -> Result:
    """A body delimited by the connection's close, cut by a reset, must not be recorded ok."""
    tag = "c13"
    url = URL(ctx.url + tagged(f"/u/rst{CHAT}", tag), encoded=True)
    try:
        async with ctx.session.post(
            url,
            data=_chat_body(True),
            timeout=aiohttp.ClientTimeout(total=15),
            headers={"Content-Type": "application/json", LABEL_HEADER: label(tag)},
        ) as r:
            status = r.status
            data = await r.read()
        seen = f"client got {status} and a clean end after {len(data)} B"
    except aiohttp.ClientError as exc:
        seen = f"client got a cut: {type(exc).__name__}"
    except TimeoutError:
        seen = "client got nothing within 15 s"
    return Result(ctx.up.rst_served > 0, seen, _outcome(tag, "upstream_reset"))


async def client_disconnect_mid_body(ctx: Ctx) -> Result:
    """The client sends half its declared body and closes."""
    tag, offset = "c17", ctx.daemon.err_size()
    _reader, writer = await wire.connect(ctx.port)
    try:
        writer.write(
            wire.head(
                "POST",
                tagged(f"/u/fast{CHAT}", tag),
                ctx.port,
                [("Content-Type", "application/json"), ("Content-Length", "200000"), (LABEL_HEADER, label(tag))],
            )
        )
        writer.write(b"{" + b" " * 99_999)
        await writer.drain()
        await asyncio.sleep(0.2)
    finally:
        wire.close(writer)
    await asyncio.sleep(2.5)
    err = ctx.daemon.err_since(offset)
    tb = [line for line in err.splitlines() if "Traceback" in line or "Error" in line.split(":")[0]]
    detail = (
        "no traceback in the daemon's stderr" if "Traceback" not in err else f"stderr got a TRACEBACK ({tb[-1][:120]})"
    )
    return Result("Traceback" not in err, detail, _outcome(tag, "client_disconnected"))


def _fill(path) -> int:
    """Write to ``path`` until the file system is full; bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            block = b"\0" * size
            for _ in range(1 << 16):
                try:
                    written += f.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def _failure_reported(status: dict) -> str | None:
    """Where ``db status --json`` says storing failed, if it does."""
    writer = status.get("writer") if isinstance(status.get("writer"), dict) else {}
    if (writer.get("write_failed") or 0) > 0:
        return f"writer.write_failed={writer['write_failed']}"

    def walk(value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                found = walk(v, f"{path}.{k}" if path else k)
                if found:
                    return found
        elif value not in (None, 0, False, "", [], {}) and any(
            w in path.lower() for w in ("write_fail", "error", "store_fail")
        ):
            return f"{path}={str(value)[:100]}"
        return None

    return walk(status, "")


async def _db_status(db, home) -> tuple[str | None, str]:
    proc = await asyncio.create_subprocess_exec(
        CTXSCOPE,
        "db",
        "status",
        "--db",
        str(db),
        "--json",
        env=env_for(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    try:
        found = _failure_reported(json.loads(out))
    except ValueError:
        text = (out + err).decode(errors="replace")
        found = text.strip()[:100] if any(w in text.lower() for w in ("full", "space", "fail")) else None
    return found, (out + err).decode(errors="replace")[:300]


async def disk_full(ctx: Ctx) -> Result:
    """The database on a full disk: forwarding goes on, status says so, nothing is lost once space returns."""
    if os.geteuid() != 0:
        return Result(None, "no tmpfs")
    mnt = ctx.work / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(mnt)], capture_output=True, timeout=20
    )
    if mounted.returncode != 0:
        return Result(None, "no tmpfs")
    daemon, tags, db = None, [f"c18-{i:02d}" for i in range(20)], mnt / "captures.db"
    try:
        config = ctx.work / "ctxscope.toml"
        daemon = await asyncio.to_thread(
            start_daemon, "diskfull", ctx.work, ctx.work / "home-diskfull", db, {"fast": ctx.bg.upstream}, config
        )
        ctx.others.append(daemon)
        ctx.sampler.roots.append(daemon.pid)
        await asyncio.sleep(0.5)
        filled = await asyncio.to_thread(_fill, mnt / "filler")
        statuses = []
        for tag in tags:
            try:
                st, _, _ = await ctx.http(
                    "POST",
                    tagged(f"/u/fast{CHAT}", tag),
                    body=_chat_body(False),
                    base=daemon.url,
                    headers={"Content-Type": "application/json", LABEL_HEADER: label("c18")},
                )
            except (TimeoutError, aiohttp.ClientError) as exc:
                st = type(exc).__name__
            statuses.append(st)
        reported, text = None, ""
        for _ in range(12):  # the writer stores within a few seconds: it must say it could not
            reported, text = await _db_status(db, ctx.home)
            if reported:
                break
            await asyncio.sleep(1)
        while_full = await asyncio.to_thread(count_tag, db, "c18-", prefix=True)
        (mnt / "filler").unlink()
        await wait_stored(db, "c18-", 45, n=len(tags), prefix=True)
        how = await asyncio.to_thread(stop_daemon, daemon, 30)
        stored = {row_tag(r) for r in await asyncio.to_thread(read_calls, db)}
        missing = [t for t in tags if t not in stored]
        ctx.lost_elsewhere += len(missing)
        answered = sum(1 for s in statuses if s == 200)
        held = answered == len(tags) and reported is not None and not missing
        return Result(
            held,
            f"filled {filled / 2**20:.1f} MiB; {answered}/20 calls answered 200 while full; db status "
            + (f"reported {reported}" if reported else f"reported NO failure ({' '.join(text.split())[:160]})")
            + f"; {while_full} stored while full; after freeing: {20 - len(missing)}/20 stored; daemon {how}",
        )
    finally:
        if daemon is not None and daemon.proc.poll() is None:
            await asyncio.to_thread(stop_daemon, daemon, 10)
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
