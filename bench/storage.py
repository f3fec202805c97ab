#!/usr/bin/env python
"""What ctxscope's capture store costs on disk against the content it was given.

Generates synthetic Claude-Code-like traffic (Anthropic Messages API, streamed): one main session
whose context grows call after call (assistant text and tool_use blocks, tool results from a few
hundred bytes to tens of KB), a compaction now and then (the next context is the summary the model
streamed), and a few subagent sessions with their own session id but the same system prompt
(~15 KB) and 18 tool definitions; the last message carries Claude Code's moving
``cache_control`` marker. Each length (300, 1,000 and 3,000 calls) is sent through a real
``ctxscope serve`` (its own home and database) to a fake upstream in this process that streams
the prepared SSE answer of each request; the bench waits until the writer has stored every call,
stops the daemon with SIGTERM and measures the database's bytes on disk (the file and its -wal and
-shm, which a clean stop removes).

Distinct content is computed here, without the store's code: the bytes of every distinct JSON
value sent (each system block, each tool definition, each message without Claude Code's moving
cache marker, serialised as in the body), counted once however many requests carried it, plus
every response body as streamed. Request
bodies' other members (model, max_tokens, metadata) are left out: they are a few bytes.

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
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy_probe"))  # the benches' shared helpers

from proxy_bench_procs import VENV_BIN, listening_port

MODEL = "claude-sonnet-4-5-20250929"
HEADERS = {
    "accept": "application/json",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
    "anthropic-dangerous-direct-browser-access": "true",
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
    "user-agent": "claude-cli/2.0.14 (external, cli)",
    "x-api-key": "sk-ant-api03-bench-not-a-real-key-000000000000000000000000000000000000",
    "x-app": "cli",
    "x-stainless-arch": "x64",
    "x-stainless-helper-method": "stream",
    "x-stainless-lang": "js",
    "x-stainless-os": "Linux",
    "x-stainless-package-version": "0.60.0",
    "x-stainless-retry-count": "0",
    "x-stainless-runtime": "node",
    "x-stainless-runtime-version": "v22.19.0",
    "x-stainless-timeout": "600",
}


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Text:
    """Pseudo-English and pseudo-code from a fixed vocabulary: compresses about as well as real text."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(4000)]
        self.weights = [1.0 / (i + 1) for i in range(len(self.words))]

    def prose(self, n: int) -> str:
        out, size = [], 0
        while size < n:
            words = self.rng.choices(self.words, self.weights, k=self.rng.randint(6, 18))
            sentence = " ".join(words).capitalize() + ". "
            out.append(sentence)
            size += len(sentence)
        return "".join(out)[:n]

    def code(self, n: int) -> str:
        out, size, line = [], 0, 1
        while size < n:
            w = self.rng.choices(self.words, self.weights, k=self.rng.randint(2, 7))
            indent = "    " * self.rng.randint(0, 3)
            text = f"{line:>6}\t{indent}{w[0]}_{w[-1]} = {'.'.join(w[1:]) or w[0]}({self.rng.randint(0, 999)})\n"
            out.append(text)
            size += len(text)
            line += 1
        return "".join(out)[:n]


def tool_defs(t: Text) -> list[dict]:
    names = [
        "Task",
        "Bash",
        "Glob",
        "Grep",
        "ExitPlanMode",
        "Read",
        "Edit",
        "MultiEdit",
        "Write",
        "NotebookEdit",
        "WebFetch",
        "TodoWrite",
        "WebSearch",
        "BashOutput",
        "KillShell",
        "SlashCommand",
        "ListMcpResources",
        "ReadMcpResource",
    ]
    out = []
    for name in names:
        props = {
            w: {"type": "string", "description": t.prose(t.rng.randint(40, 200))}
            for w in t.rng.sample(t.words[:300], t.rng.randint(1, 5))
        }
        out.append(
            {
                "name": name,
                "description": t.prose(t.rng.randint(300, 1800)),
                "input_schema": {
                    "type": "object",
                    "properties": props,
                    "required": list(props)[:1],
                    "additionalProperties": False,
                    "$schema": "http://json-schema.org/draft-07/schema#",
                },
            }
        )
    return out


def tool_result_size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.70:
        return rng.randint(200, 2000)
    if r < 0.95:
        return rng.randint(2000, 10000)
    return rng.randint(10000, 40000)


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


def stream_of(blocks: list[dict], rng: random.Random, usage_in: int) -> bytes:
    """An Anthropic SSE stream that produces ``blocks``."""
    msg_id = "msg_01" + "".join(
        rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789") for _ in range(22)
    )
    parts = [
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 4,
                        "cache_creation_input_tokens": 500,
                        "cache_read_input_tokens": usage_in,
                        "output_tokens": 1,
                        "service_tier": "standard",
                    },
                },
            },
        )
    ]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            parts.append(
                sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
            )
            text = block["text"]
            for j in range(0, len(text), 60):
                parts.append(
                    sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": text[j : j + 60]},
                        },
                    )
                )
        else:
            parts.append(
                sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                    },
                )
            )
            raw = dumps(block["input"])
            for j in range(0, len(raw), 80):
                parts.append(
                    sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": raw[j : j + 80]},
                        },
                    )
                )
        parts.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
    parts.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 300},
            },
        )
    )
    parts.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(parts)


@dataclass
class Call:
    body: bytes
    response: bytes


@dataclass
class Traffic:
    calls: list[Call] = field(default_factory=list)
    distinct: set[str] = field(default_factory=set)  # distinct JSON values sent
    response_bytes: int = 0

    @property
    def distinct_bytes(self) -> int:
        return sum(len(v.encode()) for v in self.distinct) + self.response_bytes


def _with_marker(message: dict) -> dict:
    content = list(message["content"])
    content[-1] = {**content[-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": content}


class Agent:
    """One session: its id, its messages, and how it grows."""

    def __init__(self, t: Text, system: list[dict], tools: list[dict], traffic: Traffic, first_prompt: str):
        self.t, self.system, self.tools, self.traffic = t, system, tools, traffic
        self.session = str(uuid.UUID(int=t.rng.getrandbits(128)))
        self.messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": first_prompt}]}]
        self.n_tool = 0

    def send(self, blocks: list[dict]) -> None:
        """One call: the current messages go out, ``blocks`` come back (and join the messages)."""
        # Claude Code's moving cache marker: on the last block of the last message only.
        marked = self.messages[:-1] + [_with_marker(self.messages[-1])]
        body = {
            "model": MODEL,
            "messages": marked,
            "temperature": 1,
            "system": self.system,
            "tools": self.tools,
            "metadata": {"user_id": f"user_{'a' * 64}_account__session_{self.session}"},
            "max_tokens": 32000,
            "stream": True,
        }
        raw = dumps(body).encode()
        response = stream_of(blocks, self.t.rng, len(raw) // 4)
        self.traffic.calls.append(Call(raw, response))
        self.traffic.distinct.update(dumps(v) for v in self.system)
        self.traffic.distinct.update(dumps(v) for v in self.tools)
        self.traffic.distinct.update(dumps(v) for v in self.messages)
        self.traffic.response_bytes += len(response)
        self.messages = self.messages + [{"role": "assistant", "content": blocks}]

    def step(self) -> None:
        """The model says a little and calls a tool; its result comes back in a user message."""
        t = self.t
        self.n_tool += 1
        tool_id = f"toolu_01{self.session[:8]}{self.n_tool:06d}"
        name = t.rng.choice([tool["name"] for tool in self.tools])
        blocks = [
            {"type": "text", "text": t.prose(t.rng.randint(80, 700))},
            {
                "type": "tool_use",
                "id": tool_id,
                "name": name,
                "input": {
                    "file_path": "/src/" + "/".join(t.rng.sample(t.words[:500], 3)) + ".py",
                    "pattern": t.prose(t.rng.randint(10, 200)),
                },
            },
        ]
        self.send(blocks)
        size = tool_result_size(t.rng)
        content = t.code(size) if t.rng.random() < 0.6 else t.prose(size)
        self.messages = self.messages + [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": content}]}
        ]

    def compact(self) -> None:
        """Ask for a summary of the whole context; the next context is that summary."""
        self.messages = self.messages + [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Your task is to create a detailed summary of the conversation so far."}
                ],
            }
        ]
        summary = self.t.prose(self.t.rng.randint(3000, 8000))
        self.send([{"type": "text", "text": summary}])
        self.messages = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "This session is being continued from a previous conversation. " + summary}
                ],
            }
        ]


def generate(n_calls: int, seed: int = 22) -> Traffic:
    rng = random.Random(seed)
    t = Text(rng)
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": t.prose(15000), "cache_control": {"type": "ephemeral"}},
    ]
    tools = tool_defs(t)
    traffic = Traffic()
    main = Agent(t, system, tools, traffic, t.prose(400))
    subagents_at = set(rng.sample(range(20, max(21, n_calls - 40)), k=max(1, n_calls // 250)))
    next_compaction = rng.randint(60, 110)
    since = 0
    while len(traffic.calls) < n_calls:
        if len(traffic.calls) in subagents_at:
            sub = Agent(t, system, tools, traffic, t.prose(rng.randint(200, 1200)))
            for _ in range(min(rng.randint(8, 20), n_calls - len(traffic.calls))):
                sub.step()
            continue
        if since >= next_compaction:
            main.compact()
            since, next_compaction = 0, rng.randint(60, 110)
            continue
        main.step()
        since += 1
    return traffic


# ---- the fake upstream and the daemon -------------------------------------------------------


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
