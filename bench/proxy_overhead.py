#!/usr/bin/env python
"""What ctxscope costs on the wire: direct vs a minimal aiohttp passthrough vs the real daemon.

Three kinds of process, all on loopback: a fast upstream, the proxies under test (the real
``ctxscope serve`` with capture on, and a ~30-line aiohttp passthrough), and the load generator
(this process, an aiohttp client with keep-alive). The minimal passthrough is the yardstick: it is
what any aiohttp proxy costs, so "ctxscope / minimal" isolates what ctxscope itself adds.

Phases: small JSON POSTs at concurrency 1 (1 s) and 32 (1.5 s); 200-chunk SSE streams back to
back (TTFB and total), and again with a 10 ms gap between streams ("paced": each stream starts on
an idle machine); 1 MB request bodies. ctxscope's proxy hands its captures to the writer child in
a pause of 50 ms or every 0.5 s; the child spools them and stores them in the pause after the
phase, or beside the traffic once it has gone on for 5 s (``--duration 4`` makes the c32 phase 6 s
long and shows that sustained case). Each round runs every phase against every
target, the order of targets rotating and reversing from round to round so drift cancels; figures
are medians across rounds (ratios and differences are paired per round, then the median is taken).
After every phase the bench waits until the proxy processes and their child processes (ctxscope's
capture writer runs in one) are idle and ctxscope reports no call left to store, so the capture
writer's backlog is charged to the phase that made it, never to the next target. CPU per request
is reported for the proxy process and, on a line of its own, for its child processes (the capture
writer), so the cost of capture is not hidden in another process. At the end the capture DB must
hold every call that was answered through ctxscope.

Files: this one runs the rounds; in proxy_probe/, proxy_bench_wire.py has the payloads and the two
servers (run as child processes), proxy_bench_procs.py starts processes and reads their CPU,
proxy_bench_load.py makes the load, proxy_bench_report.py prints the figures.

    .venv/bin/python bench/proxy_overhead.py                  # ~1.5 minutes on 2 cores
    .venv/bin/python bench/proxy_overhead.py --quick          # ~20 s
    .venv/bin/python bench/proxy_overhead.py --loops both     # proxies on asyncio and on uvloop
    .venv/bin/python bench/proxy_overhead.py --with-nocapture # also the daemon with capture disabled
    .venv/bin/python bench/proxy_overhead.py --with-otlp-down # also the daemon exporting to a down collector

After the rounds, each proxy's process tree is measured at rest: its RSS (by process: the daemon,
the writer child, the simulator if anything started it) and
its CPU over 5 s with no traffic (% of one core, utime+stime of the tree as bench/idle.py reads it);
then, once the writer child has let go of its caches after a minute without calls (its idle
release), the tree's RSS again.

The line before the last reads ``added TTFB p50 X.XX ms vs direct, X.XX ms vs minimal``. The last
line reads ``ratio vs minimal passthrough: c1 X.XX, c32 X.XX; CPU per call Z.ZZ×; RSS N MB; idle P.PP%``:
throughput ratios at c1 and c32, the CPU of all of ctxscope's processes (proxy and capture writer,
the drain after each phase included) per small call over the c1 and c32 phases against the
minimal passthrough's, the RSS of the daemon's process tree after the bench, and its idle CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy_probe"))  # the bench's own modules

from proxy_bench_load import PACED_GAP, PHASES, Phase, closed_loop, streams
from proxy_bench_procs import (
    Target,
    after_idle_release,
    capture_backlog,
    child_env,
    children_cpu,
    cpu_seconds,
    idle_share,
    scheduling,
    settle,
    spawn_ctxscope,
    spawn_role,
    stop,
    tree_rss,
)
from proxy_bench_report import print_last_line, report
from proxy_bench_wire import CHAT_PATH, SMALL_REQ, UPLOAD_REQ, have_uvloop, run_loop

IDLE_SECONDS = 5.0  # the window of no traffic in which idle CPU is read (as bench/idle.py does, shorter)


async def run_phase(phase: str, target: Target, session, cfg, pids: list[int], warm: bool, backlog) -> Phase:
    url = target.base + CHAT_PATH
    scale = 0.3 if warm else 1.0
    pid = target.proc.pid if target.proc else None
    before = (cpu_seconds(pid), cpu_seconds(pid, pid), children_cpu(pid)) if pid else None
    if phase == "c1":
        res = await closed_loop(session, url, SMALL_REQ, "small", 1, cfg.duration * scale)
    elif phase == "c32":
        res = await closed_loop(session, url, SMALL_REQ, "small", 32, cfg.duration * 1.5 * scale)
    elif phase == "stream":
        res = await streams(session, url, max(3, int(cfg.streams * scale)))
    elif phase == "paced":
        res = await streams(session, url, max(3, int(cfg.streams * scale)), PACED_GAP)
    else:
        res = await closed_loop(session, url, UPLOAD_REQ, "upload", 1, cfg.duration * scale)
    res.drain = await settle(pids, backlog)
    if pid:
        res.cpu, res.loop_cpu = cpu_seconds(pid) - before[0], cpu_seconds(pid, pid) - before[1]
        res.child_cpu = children_cpu(pid) - before[2]
    target.sent_ok += len(res.latencies)
    return res


def order_for(targets: list[Target], r: int) -> list[Target]:
    k = r % len(targets)
    rotated = targets[k:] + targets[:k]
    return rotated[::-1] if r % 2 else rotated


async def bench(cfg) -> int:
    work = Path(tempfile.mkdtemp(prefix="ctxscope-bench-"))
    env = child_env(work / "home")
    aux_loop = "uvloop" if have_uvloop() else "asyncio"
    proxy_loops = ["asyncio", "uvloop"] if cfg.loops == "both" else [aux_loop]
    if "uvloop" in proxy_loops and not have_uvloop():
        raise SystemExit("--loops both needs uvloop installed")
    up_proc, up_port = spawn_role("upstream", aux_loop, env, work / "upstream.log")
    upstream = f"http://127.0.0.1:{up_port}"
    targets = [Target("direct", aux_loop, upstream)]
    procs = [up_proc]
    try:
        for loop in proxy_loops:
            tag = f"[{loop}]" if len(proxy_loops) > 1 else ""
            p, port = spawn_role("passthrough", loop, env, work / f"minimal-{loop}.log", upstream)
            procs.append(p)
            targets.append(Target("minimal", loop, f"http://127.0.0.1:{port}", p, tag=tag))
            kinds = ["ctxscope"] + ["nocapture"] * cfg.with_nocapture + ["otlp-down"] * cfg.with_otlp_down
            for kind in kinds:
                p, port, db = spawn_ctxscope(kind, loop, upstream, work, env)
                procs.append(p)
                targets.append(Target(kind, loop, f"http://127.0.0.1:{port}/u/fast", p, db, tag=tag))
        pids = [t.proc.pid for t in targets if t.proc]
        print(
            f"python {platform.python_version()}, aiohttp {aiohttp.__version__}, {os.cpu_count()} cpus; "
            f"upstream+client loop {aux_loop}, proxy loop(s) {', '.join(proxy_loops)}; {cfg.rounds} rounds "
            f"(+1 warm-up), {cfg.duration:.1f} s per closed-loop phase, {cfg.streams} streams/round",
            flush=True,
        )
        sessions = {
            t.name: aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                trust_env=False,
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=600),
            )
            for t in targets
        }
        status = sessions[targets[0].name]  # the direct target's session has no proxy to disturb

        async def backlog() -> int:
            return await capture_backlog(status, targets)

        t_run = time.perf_counter()
        try:
            for r in range(cfg.rounds + 1):
                order = order_for(targets, r)
                for phase in PHASES:
                    for t in order:
                        res = await run_phase(phase, t, sessions[t.name], cfg, pids, r == 0, backlog)
                        if r:
                            t.results.setdefault(phase, []).append(res)
                print(
                    f"  {'warm-up' if r == 0 else f'round {r}/{cfg.rounds}'} done "
                    f"({' > '.join(t.name for t in order)}), {time.perf_counter() - t_run:.0f} s",
                    flush=True,
                )
            # Memory and idle CPU of each daemon after the bench: its whole process tree, every call
            # stored (the last phase's settle waited for that), no traffic for IDLE_SECONDS.
            for t in targets:
                if t.kind != "direct" and t.proc is not None:
                    await settle(pids, backlog)
                    t.rss = tree_rss(t.proc.pid)
                    t.idle = await idle_share(t.proc.pid, IDLE_SECONDS)
            for t in targets:  # a daemon left running: its writer child lets go of its caches after a minute
                if t.kind == "ctxscope" and t.proc is not None:
                    t.rss_released = await after_idle_release(status, t, cap=120.0)
        finally:
            for s in sessions.values():
                await s.close()
    finally:
        for t in targets:
            if t.kind in ("ctxscope", "otlp-down") and t.proc is not None:
                t.sched = scheduling(t.proc.pid)
        codes = {p.pid: stop(p) for p in reversed(procs)}
    ok = report(targets, cfg)
    bad_exit = [t.name for t in targets if t.proc and codes[t.proc.pid] != 0]
    if bad_exit:
        print(f"non-zero exit from {bad_exit}; see the logs")
    ok = ok and not bad_exit
    if ok and not cfg.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs and capture DBs kept in {work}")
    print_last_line(targets)
    return 0 if ok else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~20 s: 2 rounds, short phases")
    ap.add_argument("--rounds", type=int, help="measured rounds (default 6, quick 2)")
    ap.add_argument("--duration", type=float, help="seconds per closed-loop phase (default 1.0, quick 0.5)")
    ap.add_argument("--streams", type=int, help="streams per target per round (default 40, quick 15)")
    ap.add_argument(
        "--loops",
        choices=("auto", "both"),
        default="auto",
        help="proxies on the loop the daemon picks (auto) or on asyncio and uvloop side by side",
    )
    ap.add_argument(
        "--with-nocapture",
        action="store_true",
        help="also run the daemon with its capture sink disabled, to split forwarding from capture cost",
    )
    ap.add_argument(
        "--with-otlp-down",
        action="store_true",
        help="also run the daemon exporting to an OTLP endpoint that refuses connections (export must cost nothing)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, capture DBs) after a clean run")
    cfg = ap.parse_args()
    cfg.rounds = cfg.rounds or (2 if cfg.quick else 6)
    cfg.duration = cfg.duration or (0.5 if cfg.quick else 1.0)
    cfg.streams = cfg.streams or (15 if cfg.quick else 40)
    result = {}

    async def go():
        result["rc"] = await bench(cfg)

    run_loop(go(), "uvloop" if have_uvloop() else "asyncio")
    sys.exit(result["rc"])


if __name__ == "__main__":
    main()
