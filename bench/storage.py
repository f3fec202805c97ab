#!/usr/bin/env python
"""What ctxscope's capture store costs on disk against the content it was given.

Generates synthetic Claude-Code-like traffic (Anthropic Messages API, streamed; ``storage_traffic.py``:
a main session with compactions, a few subagents, Claude Code's moving ``cache_control`` marker).
Each length (300, 1,000 and 3,000 calls) is sent through a real ``ctxscope serve`` (its own home
and database) to a fake upstream in this process that streams the prepared SSE answer of each
request; the bench waits until the writer has stored every call, stops the daemon with SIGTERM and
measures the database's bytes on disk (the file and its -wal and -shm, which a clean stop removes).

Distinct content is computed without the store's code: the bytes of every distinct JSON value sent
(each system block, each tool definition, each message without the moving cache marker, serialised
as in the body), counted once however many requests carried it, plus every response body as
streamed. Request bodies' other members (model, max_tokens, metadata) are left out: a few bytes.

Per length it prints stored and distinct bytes, their ratio, and where the bytes go (dbstat: each
table and index); after measuring, every 7th call and the last 20 are read back through the store
and compared with what was sent, byte for byte. The last line reads
``storage vs distinct content: 300 calls A×, 1000 calls B×, 3000 calls C×``. On 2 shared cores it
read 1.12× / 0.98× / 0.90× (1.41× / 1.27× / 1.18× while the search index kept its own compressed
copy of every text; 3.06× / 3.02× / 3.00× with full keyframes and deltas, header lists in every row
and the search text stored whole); at 300 calls about a tenth of the distinct content is
the file's fixed cost (a page for each small table and index, the zstd dictionary).

    .venv/bin/python bench/storage.py            # 300, 1,000 and 3,000 calls (a few minutes)
    .venv/bin/python bench/storage.py --quick    # 300 calls
    .venv/bin/python bench/storage.py --calls 1000 --keep /tmp/dbs   # keep the database
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy_probe"))  # the benches' shared helpers

from proxy_bench_procs import VENV_BIN, listening_port

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the traffic beside this bench

from storage_traffic import HEADERS, Traffic, generate


async def start_upstream(answers: dict[bytes, bytes]) -> web.AppRunner:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        answer = answers[hashlib.blake2b(body, digest_size=16).digest()]
        resp = web.StreamResponse(
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "request-id": "req_" + uuid.uuid4().hex[:24],
            }
        )
        await resp.prepare(request)
        for i in range(0, len(answer), 16384):
            await resp.write(answer[i : i + 16384])
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/messages", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def upstream_port(runner: web.AppRunner) -> int:
    return runner.addresses[0][1]


def spawn_daemon(work: Path, upstream: str) -> tuple[subprocess.Popen, int, Path]:
    db = work / "capture.db"
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(CTXSCOPE_HOME=str(work / "home"), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    log = work / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "ctxscope"), "serve", "--port", "0", "--db", str(db), "--upstream", f"fake={upstream}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return proc, listening_port(proc, log), db


async def drained(session: aiohttp.ClientSession, port: int, most: int) -> None:
    """Wait until at most ``most`` answered calls are still to be stored."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        async with session.get(f"http://127.0.0.1:{port}/_ctxscope/api/status?store=0") as r:
            if (await r.json())["writer"]["queued"] <= most:
                return
        await asyncio.sleep(0.1)
    raise SystemExit("the writer did not catch up within 15 minutes")


async def send_all(traffic: Traffic, port: int) -> None:
    """Send every call in order; every 25 calls wait for the writer, so a burst never fills the
    bounded spool (a dropped call would make the store look smaller than it is)."""
    url = f"http://127.0.0.1:{port}/u/fake/v1/messages"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        for i, call in enumerate(traffic.calls):
            async with session.post(url, data=call.body, headers=HEADERS) as resp:
                got = await resp.read()
                if resp.status != 200 or got != call.response:
                    raise SystemExit(f"unexpected answer through the daemon: {resp.status} {got[:200]!r}")
            if i % 25 == 24:
                await drained(session, port, 25)
        await drained(session, port, 0)


def on_disk(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())


def breakdown(db: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    finally:
        conn.close()


def stored_calls(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    finally:
        conn.close()


def verify(db: Path, traffic: Traffic) -> int:
    """Read every 7th call and the last 20 back through the store (after measuring) and compare."""
    from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, open_db

    conn = open_db(db)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM calls ORDER BY rowid")]
        picked = sorted(set(range(0, len(ids), 7)) | set(range(max(0, len(ids) - 20), len(ids))))
        for i in picked:
            call = traffic.calls[i]
            if get_request_raw(conn, ids[i]) != call.body or get_response_raw(conn, ids[i]) != call.response:
                raise SystemExit(f"call {i} ({ids[i]}) does not read back as sent")
    finally:
        conn.close()
    return len(picked)


async def run_length(n: int, work: Path) -> float:
    traffic = generate(n)
    answers = {hashlib.blake2b(c.body, digest_size=16).digest(): c.response for c in traffic.calls}
    runner = await start_upstream(answers)
    t0 = time.monotonic()
    try:
        proc, port, db = spawn_daemon(work, f"http://127.0.0.1:{upstream_port(runner)}")
        try:
            await send_all(traffic, port)
            deadline = time.monotonic() + 120
            while stored_calls(db) < n and time.monotonic() < deadline:  # the last batch committed
                await asyncio.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = await asyncio.to_thread(proc.wait, 300)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    finally:
        await runner.cleanup()
    if rc != 0:
        raise SystemExit(f"ctxscope serve exited with {rc}:\n{(work / 'serve.log').read_text()[-4000:]}")
    stored, distinct = on_disk(db), traffic.distinct_bytes
    sent = sum(len(c.body) + len(c.response) for c in traffic.calls)
    calls = stored_calls(db)
    if calls != n:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        events = conn.execute("SELECT kind, SUM(count), MAX(detail) FROM store_events GROUP BY kind").fetchall()
        conn.close()
        raise SystemExit(f"{n} calls sent, {calls} stored; store events: {events}")
    ratio = stored / distinct
    checked = verify(db, traffic)
    print(
        f"\n{n} calls ({time.monotonic() - t0:.0f} s): sent {sent / 2**20:.1f} MB, "
        f"distinct {distinct / 2**20:.2f} MB, stored {stored / 2**20:.2f} MB on disk: {ratio:.2f}x; "
        f"{stored / n:.0f} B per call; {checked} calls read back byte-exact"
    )
    for name, size in breakdown(db):
        if size >= 4096 * 4:
            print(f"  {name:<34} {size / 2**10:>9.0f} KB  {size / n:>7.0f} B/call  {size / distinct:>6.1%} of distinct")
    return ratio


async def main_async(lengths: list[int], keep: Path | None) -> None:
    ratios = {}
    with tempfile.TemporaryDirectory(prefix="ctxscope-storage-") as tmp:
        for n in lengths:
            work = (keep or Path(tmp)) / str(n)
            work.mkdir(parents=True)
            ratios[n] = await run_length(n, work)
    print("storage vs distinct content: " + ", ".join(f"{n} calls {r:.2f}×" for n, r in ratios.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 calls only")
    ap.add_argument("--calls", type=int, action="append", help="a session length (repeatable)")
    ap.add_argument("--keep", type=Path, help="keep the databases in this (new) folder")
    args = ap.parse_args()
    lengths = args.calls or ([300] if args.quick else [300, 1000, 3000])
    asyncio.run(main_async(lengths, args.keep))


if __name__ == "__main__":
    main()
