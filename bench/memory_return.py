#!/usr/bin/env python
"""Does memory return after a big read or a burst? RSS of the installed ``ctxscope serve`` and of its
writer child, at rest, right after, and every 5 s for a minute (docs/architecture.md, "Memory").

1. Builds (or reuses, ``--store DIR``) a store through the writer's ingest: one ``--calls``-call
   session and one session growing to ``--big-tokens`` tokens (``bench/writer_cost.py``'s sessions).
2. Starts the installed ``ctxscope serve`` on it (uvloop, as users run it); 5 s later, before any
   call or read, is the daemon's bare rest (as ``bench/scale.py`` takes it). Then the web UI's big
   reads of both sessions (sessions list, session table, transcript, findings, advice, call pages,
   raw body, diff, search, usage), and the RSS of the daemon and of the daemon with its children
   (the reader child answers the reads: ``web/reader.py``) every 5 s for ``--watch`` seconds.
3. A burst of ``--burst`` small calls from ``--clients`` threads, then a few 4 MB calls: the writer
   child's RSS at rest, after, and every 5 s (0 once it is gone: a child a burst left swollen lets
   go after SWOLLEN_RELEASE and is retired, ``inspector/writer/child/loop.py``).
4. ``--steady`` calls, one every 2 s, of one conversation growing from 1 MB: how soon each is
   stored, and how many writer children stored them (steady traffic must not retire its child).

    .venv/bin/python bench/memory_return.py --store /tmp/memstore                # 1,000 calls + 1M tokens
    .venv/bin/python bench/memory_return.py --calls 300 --big-tokens 200000 --watch 30
    .venv/bin/python bench/memory_return.py --no-reads --burst 3000 --watch 35 --steady 20
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from writer_cost import Session, exchange

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.writer.storing.thread import CaptureWriter

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1},
    }
).encode()


def build(db: Path, calls: int, big_tokens: int) -> None:
    writer = CaptureWriter(db, analyzers=writer_analyzers(), status_file=False, keep_unstored=False)
    writer.start()
    began = time.monotonic()
    try:
        session = Session(1, 3000, new_words=120)
        for i in range(calls):
            writer.submit(exchange("long", i, session.next_body()))
            while writer.stats().queued > 200:
                time.sleep(0.05)
        big, i = Session(10_000_000, 20_000, new_words=600), 0
        while big.tokens < big_tokens:
            writer.submit(exchange("big", i, big.next_body()))
            i += 1
            while writer.stats().queued > 8:
                time.sleep(0.01)
        while writer.stats().queued:
            time.sleep(0.1)
    finally:
        writer.stop()
    print(f"store: {calls} + {i} calls ({big.tokens:,} tokens) built in {time.monotonic() - began:.0f} s")


def rss_mb(pid: int) -> float:
    """VmRSS in MB; 0 for a process that is gone (an idle writer child exits)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def writer_child(pid: int) -> int | None:
    """The writer child among ``pid``'s children (started by a thread: not in the main thread's list)."""
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text() if name.isdigit() else ""
            if (
                stat
                and int(stat[stat.rindex(")") + 2 :].split()[1]) == pid
                and b"writer.child.entry" in Path(f"/proc/{name}/cmdline").read_bytes()
            ):
                return int(name)
        except OSError:
            continue
    return None


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base: str, path: str) -> int:
    with urllib.request.urlopen(base + path, timeout=900) as r:
        return len(r.read())


def post(base: str, body: bytes) -> None:
    req = urllib.request.Request(
        base + "/u/fast/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()


def small(i: int) -> bytes:
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": f"hello {i}"}]}).encode()


def tree_mb(pid: int) -> float:
    """RSS in MB of a process and its children (the daemon, its writer and reader children)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += rss_mb(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
    return total


def watch(label: str, pid: int, seconds: float, rest: float, rss: Callable[[int], float] = rss_mb) -> None:
    figures = []
    for t in range(0, int(seconds) + 1, 5):
        if t:
            time.sleep(5)
        figures.append(rss(pid))
    print(f"  {label} every 5 s (MB): " + " ".join(f"{f:.0f}" for f in figures))
    at30 = figures[min(6, len(figures) - 1)]
    print(
        f"  {label}: rest {rest:.0f} MB, peak seen {max(figures):.0f}, after {min(30, seconds):.0f} s {at30:.0f}"
        f" ({at30 / rest:.2f}x rest), after {seconds:.0f} s {figures[-1]:.0f} ({figures[-1] / rest:.2f}x rest)"
    )


def written(base: str) -> int:
    with urllib.request.urlopen(base + "/_ctxscope/api/status?store=0", timeout=30) as r:
        w = json.loads(r.read())["writer"]
    return -1 if w["queued"] else w["written"]


def wait_stored(base: str, calls: int) -> None:
    """Until the writer says ``calls`` are written and none waits."""
    while written(base) < calls:
        time.sleep(0.2)


def steady(base: str, pid: int, calls: int, child_rest: float) -> None:
    """One call every 2 s of a conversation growing from ~1 MB: seconds from each answer to its
    being stored, and the writer children that stored them."""
    history = [{"role": "user", "content": " ".join(f"s{j}" for j in range(180_000))}]
    delays, children, rss = [], set(), []
    for i in range(calls):
        began = time.monotonic()
        while (before := written(base)) < 0:
            time.sleep(0.02)
        post(base, json.dumps({"model": "gpt-4o", "messages": history}).encode())
        answered = time.monotonic()
        while written(base) <= before:
            time.sleep(0.02)
        delays.append(time.monotonic() - answered)
        child = writer_child(pid)
        children.add(child)
        rss.append(rss_mb(child) if child else 0.0)
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"next {i} " * 2000}]
        time.sleep(max(0.0, 2.0 - (time.monotonic() - began)))
    delays.sort()
    print(
        f"\nsteady: {calls} calls, one every 2 s, ~{len(json.dumps(history)) / 2**20:.1f} MB at the end: stored"
        f" {delays[len(delays) // 2]:.2f} s after the answer (median), {delays[-1]:.2f} s at most;"
        f" {len(children - {None})} writer child(ren); child RSS {min(rss):.0f}-{max(rss):.0f} MB"
        f" ({max(rss) / child_rest:.2f}x the rest before the burst)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("/tmp/ctxscope-memory-return"))
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--big-tokens", type=int, default=1_000_000)
    ap.add_argument("--burst", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--watch", type=float, default=60.0)
    ap.add_argument("--big-calls", type=int, default=4, help="4 MB calls after the burst")
    ap.add_argument("--steady", type=int, default=0, help="calls one every 2 s after the burst")
    ap.add_argument("--no-reads", action="store_true", help="only the burst")
    ap.add_argument("--no-compute", action="store_true", help="skip findings and advice (their own child)")
    ap.add_argument("--verbose", action="store_true", help="the daemon's RSS after each read")
    ap.add_argument("--idle-release", type=float, default=None, help="serve's --limit idle_release=S")
    args = ap.parse_args()
    args.store.mkdir(parents=True, exist_ok=True)
    db = args.store / "c.db"
    if not db.exists():
        build(db, args.calls, args.big_tokens)
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    home = args.store / "home"
    env = dict(os.environ, CTXSCOPE_HOME=str(home))
    with open(args.store / "serve.log", "w") as log:
        proc = subprocess.Popen(
            [
                str(CTXSCOPE),
                "serve",
                "--port",
                str(port),
                "--db",
                str(db),
                "--upstream",
                f"fast=http://127.0.0.1:{upstream.server_port}",
                *(["--limit", f"idle_release={args.idle_release}"] if args.idle_release else []),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(300):
            try:
                get(base, "/_ctxscope/api/status?store=0")
                break
            except OSError:
                time.sleep(0.1)
        stored = sqlite3.connect(db).execute("select count(*) from calls").fetchone()[0]
        time.sleep(5)
        rest, tree_rest = rss_mb(proc.pid), tree_mb(proc.pid)
        print(
            f"daemon at its bare rest (5 s after start, no call, no read): {rest:.0f} MB, with its children"
            f" {tree_rest:.0f} MB; store {stored} calls, {db.stat().st_size / 2**20:.0f} MB"
        )
        views = {}
        for s in () if args.no_reads else ("long", "big"):
            view = json.loads(urllib.request.urlopen(f"{base}/_ctxscope/api/session?s={s}&limit=100000").read())
            rows = sorted(view.get("calls") or [], key=lambda r: r.get("started_at") or "")
            views[s] = (rows[0]["id"], rows[len(rows) // 2]["id"], rows[-1]["id"])
        began = time.monotonic()
        for s, (first, mid, last) in () if args.no_reads else views.items():
            for path in (
                "/_ctxscope/api/sessions?limit=100000",
                f"/_ctxscope/api/session?s={s}&limit=100000",
                f"/_ctxscope/api/sessions/{s}/transcript",
                f"/_ctxscope/api/findings?s={s}",
                f"/_ctxscope/api/advice?s={s}",
                f"/_ctxscope/api/call?id={last}",
                f"/_ctxscope/api/call?id={mid}",
                f"/_ctxscope/api/raw?id={last}",
                f"/_ctxscope/api/diff?id={last}&base={first}",
                "/_ctxscope/api/search?q=function",
                "/_ctxscope/api/usage",
            ):
                if args.no_compute and ("findings" in path or "advice" in path):
                    continue
                t0 = time.monotonic()
                try:
                    size = get(base, path)
                except OSError as exc:
                    print(f"  {path}: {exc}")
                    continue
                if args.verbose:
                    print(
                        f"  {path[12:64]:<52} {time.monotonic() - t0:6.2f} s {size:>11,} B;"
                        f" daemon {rss_mb(proc.pid):.0f} MB"
                    )
        print(
            f"big reads took {time.monotonic() - began:.0f} s; daemon right after: {rss_mb(proc.pid):.0f} MB,"
            f" with its children {tree_mb(proc.pid):.0f} MB"
        )
        if not args.no_reads:
            watch("daemon and its children", proc.pid, args.watch, tree_rest, tree_mb)
            alone = rss_mb(proc.pid)
            print(f"  the daemon alone: rest {rest:.0f} MB, now {alone:.0f} ({alone / rest:.2f}x)")

        post(base, small(0))  # starts the writer child (an idle one exits: its idle release)
        wait_stored(base, 1)
        time.sleep(3)
        before = written(base)
        child = writer_child(proc.pid)
        assert child is not None
        child_rest = rss_mb(child)
        burst_began = time.monotonic()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda i: post(base, small(i)), range(1, args.burst + 1)))
        for i in range(args.big_calls):
            post(
                base,
                json.dumps(
                    {
                        "model": "gpt-4o",
                        "messages": [{"role": "user", "content": " ".join(f"b{i}w{j}" for j in range(450_000))}],
                    }
                ).encode(),
            )
        wait_stored(base, before + args.burst + args.big_calls)
        child = writer_child(proc.pid) or child
        print(
            f"\nburst of {args.burst} small calls ({args.clients} clients) + {args.big_calls} calls of 4 MB, stored in "
            f"{time.monotonic() - burst_began:.0f} s; writer child at rest {child_rest:.0f} MB, "
            f"right after {rss_mb(child):.0f} MB; daemon {rss_mb(proc.pid):.0f} MB"
        )
        watch("writer child", child, args.watch, child_rest)
        print(f"  daemon after the burst: {rss_mb(proc.pid):.0f} MB ({rss_mb(proc.pid) / rest:.2f}x rest)")
        if args.steady:
            steady(base, proc.pid, args.steady, child_rest)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        upstream.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
