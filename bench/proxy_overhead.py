#!/usr/bin/env python
"""What ctxscope costs on the wire: direct vs a minimal aiohttp passthrough vs the real daemon.

Three kinds of process, all on loopback: a fast upstream (this file, ``--role upstream``), the
proxies under test (the real ``ctxscope serve`` with capture on, and a ~30-line aiohttp
passthrough in this file, ``--role passthrough``), and the load generator (this process, an
aiohttp client with keep-alive). The minimal passthrough is the yardstick: it is what any
aiohttp proxy costs, so "ctxscope / minimal" isolates what ctxscope itself adds.

Phases: small JSON POSTs at concurrency 1 and 32; 200-chunk SSE streams back to back (TTFB and
total), and again with a 10 ms gap between streams ("paced": each stream starts on an idle
machine; ctxscope's capture writer waits for a 50 ms pause, so it stores these streams after the
phase); 1 MB request bodies. Each round runs every phase
against every target, the order of targets rotating and reversing from round to round so drift
cancels; figures are medians across rounds (ratios and differences are paired per round, then the
median is taken). After every phase the bench waits until the proxy processes and their child
processes (ctxscope's capture writer runs in one) are idle, so the capture writer's backlog is
charged to the phase that made it, never to the next target. CPU per request is reported for the
proxy process and, on a line of its own, for its child processes (the capture writer), so the cost
of capture is not hidden in another process. At the end the capture DB must hold every call that
was answered through ctxscope.

    .venv/bin/python bench/proxy_overhead.py                  # ~1.5 minutes on 2 cores
    .venv/bin/python bench/proxy_overhead.py --quick          # ~20 s
    .venv/bin/python bench/proxy_overhead.py --loops both     # proxies on asyncio and on uvloop
    .venv/bin/python bench/proxy_overhead.py --with-nocapture # also the daemon with capture disabled

The last line reads ``ratio vs minimal passthrough: c1 X.XX, c32 X.XX; added TTFB p50 X.XX ms``;
the added TTFB there is ctxscope's stream TTFB p50 minus DIRECT (what a user notices).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

VENV_BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
CHAT_PATH = "/v1/chat/completions"
STREAM_CHUNKS = 200
UPLOAD_BYTES = 1 << 20
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-not-a-real-key"}

# ---- payloads: OpenAI chat shapes, so the capture writer does its real work on them ----------

SMALL_REQ = (b'{"model":"gpt-bench","max_tokens":16,"messages":[{"role":"system","content":"You are terse."},'
             b'{"role":"user","content":"Say hi, request %08d."}]}')
STREAM_REQ = SMALL_REQ[:-1] + b',"stream":true,"stream_options":{"include_usage":true}}'
_UPLOAD_HEAD = b'{"model":"gpt-bench","messages":[{"role":"user","content":"'
_UPLOAD_TAIL = b'"},{"role":"user","content":"request %08d"}]}'
_FILLER = b"The quick brown fox jumps over the lazy dog while the proxy copies bytes. "
_fill_len = UPLOAD_BYTES - len(_UPLOAD_HEAD) - len(_UPLOAD_TAIL % 0)
UPLOAD_REQ = _UPLOAD_HEAD + (_FILLER * (_fill_len // len(_FILLER) + 1))[:_fill_len] + _UPLOAD_TAIL
SMALL_RESP = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "gpt-bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
}).encode()


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _stream_chunks() -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-bench"}
    out = [_sse({**base, "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]})
           for i in range(STREAM_CHUNKS - 3)]
    out.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(_sse({**base, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 197,
                                                      "total_tokens": 217}}))
    out.append(b"data: [DONE]\n\n")
    return out


STREAM_OUT = _stream_chunks()
STREAM_LEN = sum(map(len, STREAM_OUT))

# ---- child roles: the fast upstream and the minimal passthrough --------------------------------


async def _upstream_handler(request: web.Request) -> web.StreamResponse:
    await request.read()
    if request.headers.get("X-Bench-Kind") == "stream":
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for chunk in STREAM_OUT:  # one write per chunk, as fast as the socket takes them
            await resp.write(chunk)
        await resp.write_eof()
        return resp
    return web.Response(body=SMALL_RESP, content_type="application/json")


_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                  "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
_REQ_DROP = _HOP | {"host", "content-length"}


def _passthrough_app(upstream: str) -> web.Application:
    """The least a correct streaming aiohttp proxy does: filter hop-by-hop headers, copy chunks."""
    app = web.Application(client_max_size=256 * 2**20)
    box: dict[str, aiohttp.ClientSession] = {}

    async def startup(_app):
        box["s"] = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None), trust_env=False)

    async def cleanup(_app):
        await box["s"].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _REQ_DROP]
        async with box["s"].request(request.method, upstream + request.raw_path, headers=headers,
                                    data=body or None, allow_redirects=False) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _serve_role(role: str, upstream: str | None) -> None:
    if role == "upstream":
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_route("POST", "/{tail:.*}", _upstream_handler)
    else:
        app = _passthrough_app(upstream)
    runner = web.AppRunner(app, auto_decompress=False, access_log=None, handler_cancellation=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"LISTENING {site._server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def run_loop(coro, loop: str) -> None:
    if loop == "uvloop":
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


# ---- processes ------------------------------------------------------------------------------

# `ctxscope serve` picks uvloop whenever it imports; hiding the module forces plain asyncio.
_NO_UVLOOP = "import sys; sys.modules['uvloop'] = None\n"
# --with-nocapture: the same daemon with the capture sink's submit made a no-op (forwarding alone),
# whichever sink it uses (the writer thread or the writer's child process).
_NO_CAPTURE = ("import ctxscope.inspector.writer as w, ctxscope.inspector.writer_process as wp\n"
               "w.CaptureWriter.submit = wp.WriterProcess.submit = lambda self, exchange: None\n")
_MAIN = "import sys; from ctxscope.main import main; sys.argv[0] = 'ctxscope'; main()"


@dataclass
class Target:
    kind: str  # "direct", "minimal", "ctxscope" or "nocapture"
    loop: str
    base: str  # URL prefix the client posts CHAT_PATH under
    proc: subprocess.Popen | None = None
    db: Path | None = None
    tag: str = ""
    sched: str = ""  # how its capture writer child was scheduled at the end
    sent_ok: int = 0
    results: dict[str, list["Phase"]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.kind + self.tag


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads, living or gone), or of one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def child_pids(pid: int) -> list[int]:
    """Every descendant of a process (ctxscope's capture writer and multiprocessing's helper)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def scheduling(pid: int) -> str:
    """How the busiest child of a process is scheduled (ctxscope's capture writer)."""
    best, best_cpu = None, -1.0
    for kid in child_pids(pid):
        try:
            cpu = cpu_seconds(kid)
            with open(f"/proc/{kid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if cpu > best_cpu:
            best, best_cpu = fields, cpu
    if best is None:
        return "no child process"
    policy, nice = int(best[38]), int(best[16])
    return {0: f"ordinary scheduling, nice {nice}", 3: f"batch, nice {nice}", 5: "idle class"}.get(policy, f"policy {policy}")


def children_cpu(pid: int) -> float:
    """CPU seconds of a process's living descendants (a child that exits takes its figure along)."""
    total = 0.0
    for kid in child_pids(pid):
        try:
            total += cpu_seconds(kid)
        except OSError:
            pass
    return total


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(CTXSCOPE_HOME=str(home), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


def spawn_role(role: str, loop: str, env, log: Path, upstream: str | None = None) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, __file__, "--role", role, "--loop", loop] + (["--upstream-url", upstream] if upstream else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "wb"), env=env, text=True)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        raise SystemExit(f"{role} failed to start:\n{log.read_text()}")
    return proc, int(line.split()[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ctxscope(kind: str, loop: str, upstream: str, work: Path, env) -> tuple[subprocess.Popen, int, Path]:
    port, db = free_port(), work / f"{kind}-{loop}.db"
    args = ["serve", "--port", str(port), "--db", str(db), "--upstream", f"fast={upstream}"]
    prelude = (_NO_UVLOOP if loop == "asyncio" else "") + (_NO_CAPTURE if kind == "nocapture" else "")
    cmd = [sys.executable, "-c", prelude + _MAIN, *args] if prelude else [str(VENV_BIN / "ctxscope"), *args]
    log = work / f"{kind}-{loop}.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ctxscope serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port, db
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"ctxscope serve did not listen within 60 s:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen, timeout: float = 300) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


# ---- load ----------------------------------------------------------------------------------


@dataclass
class Phase:
    latencies: list[float]  # seconds per request (total time for streams)
    elapsed: float
    errors: int
    ttfb: list[float] = field(default_factory=list)
    cpu: float | None = None  # proxy CPU seconds (all threads), including the post-phase drain
    loop_cpu: float | None = None  # of which the main thread (the event loop)
    child_cpu: float | None = None  # CPU seconds of the proxy's child processes (the capture writer)
    drain: float = 0.0  # seconds until the proxy went idle after the phase

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


_counter = iter(range(10**9))


async def post(session, url: str, body: bytes, kind: str) -> float | None:
    t0 = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={**HEADERS, "X-Bench-Kind": kind}) as r:
            await r.read()
            ok = r.status == 200
    except aiohttp.ClientError:
        return None
    return time.perf_counter() - t0 if ok else None


async def closed_loop(session, url: str, template: bytes, kind: str, concurrency: int, duration: float) -> Phase:
    lat: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration

    async def worker():
        nonlocal errors
        while time.perf_counter() < deadline:
            took = await post(session, url, template % next(_counter), kind)
            if took is None:
                errors += 1
            else:
                lat.append(took)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Phase(lat, time.perf_counter() - t0, errors)


async def streams(session, url: str, count: int, pause: float = 0.0) -> Phase:
    """Sequential streams; ``pause`` leaves a gap after each, as an agent's think time would."""
    lat, ttfb, errors = [], [], 0
    t_start = time.perf_counter()
    for _ in range(count):
        if pause and lat:
            await asyncio.sleep(pause)
        t0 = time.perf_counter()
        first, size = None, 0
        try:
            async with session.post(url, data=STREAM_REQ % next(_counter),
                                    headers={**HEADERS, "X-Bench-Kind": "stream"}) as r:
                while chunk := await r.content.readany():
                    if first is None:
                        first = time.perf_counter()
                    size += len(chunk)
                ok = r.status == 200 and size == STREAM_LEN
        except aiohttp.ClientError:
            ok = False
        if ok:
            lat.append(time.perf_counter() - t0)
            ttfb.append(first - t0)
        else:
            errors += 1
    return Phase(lat, time.perf_counter() - t_start, errors, ttfb)


def tree_cpu(pids: list[int]) -> list[float]:
    return [cpu_seconds(p) + children_cpu(p) for p in pids]


async def settle(pids: list[int], cap: float = 600.0) -> float:
    """Wait until no proxy nor any of its children burns CPU for 60 ms (capture writer drained)."""
    t0 = time.perf_counter()
    last, still = tree_cpu(pids), 0
    while still < 3 and time.perf_counter() - t0 < cap:
        await asyncio.sleep(0.02)
        now = tree_cpu(pids)
        still = still + 1 if now == last else 0
        last = now
    return time.perf_counter() - t0


# ---- the run ---------------------------------------------------------------------------------

PHASES = ("c1", "c32", "stream", "paced", "upload")
PACED_GAP = 0.010  # each stream starts with the proxy idle (shorter than the writer's pause of 50 ms)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


async def run_phase(phase: str, target: Target, session, cfg, pids: list[int], warm: bool) -> Phase:
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
    res.drain = await settle(pids)
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
            for kind in ("ctxscope", "nocapture") if cfg.with_nocapture else ("ctxscope",):
                p, port, db = spawn_ctxscope(kind, loop, upstream, work, env)
                procs.append(p)
                targets.append(Target(kind, loop, f"http://127.0.0.1:{port}/u/fast", p, db, tag=tag))
        pids = [t.proc.pid for t in targets if t.proc]
        print(f"python {platform.python_version()}, aiohttp {aiohttp.__version__}, {os.cpu_count()} cpus; "
              f"upstream+client loop {aux_loop}, proxy loop(s) {', '.join(proxy_loops)}; {cfg.rounds} rounds "
              f"(+1 warm-up), {cfg.duration:.1f} s per closed-loop phase, {cfg.streams} streams/round", flush=True)
        sessions = {t.name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), trust_env=False,
                                                  auto_decompress=False, timeout=aiohttp.ClientTimeout(total=600))
                    for t in targets}
        t_run = time.perf_counter()
        try:
            for r in range(cfg.rounds + 1):
                order = order_for(targets, r)
                for phase in PHASES:
                    for t in order:
                        res = await run_phase(phase, t, sessions[t.name], cfg, pids, warm=r == 0)
                        if r:
                            t.results.setdefault(phase, []).append(res)
                print(f"  {'warm-up' if r == 0 else f'round {r}/{cfg.rounds}'} done "
                      f"({' > '.join(t.name for t in order)}), {time.perf_counter() - t_run:.0f} s", flush=True)
        finally:
            for s in sessions.values():
                await s.close()
    finally:
        for t in targets:
            if t.kind == "ctxscope" and t.proc is not None:
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


# ---- reporting -----------------------------------------------------------------------------


def paired(a: Target, b: Target, phase: str, fn, op) -> float:
    return med([op(fn(x), fn(y)) for x, y in zip(a.results[phase], b.results[phase])])


def _ratio(x: float, y: float) -> float:
    return x / y if y else float("nan")


def _diff(x: float, y: float) -> float:
    return x - y


def rps(p: Phase) -> float:
    return p.rps


def ttfb_p50(p: Phase) -> float:
    return 1e3 * pct(p.ttfb, 0.5)


def total_p50(p: Phase) -> float:
    return 1e3 * pct(p.latencies, 0.5)


class Pooled:
    """CPU ms per request over all rounds together: one phase's CPU is only a few 10 ms clock ticks."""

    def __init__(self, attr: str):
        self.attr = attr

    def of(self, phases: list[Phase]) -> float:
        if not phases or getattr(phases[0], self.attr) is None:
            return float("nan")
        return 1e3 * sum(getattr(p, self.attr) for p in phases) / max(1, sum(len(p.latencies) for p in phases))


cpu_ms, loop_cpu_ms, child_cpu_ms = Pooled("cpu"), Pooled("loop_cpu"), Pooled("child_cpu")


class PooledSum(Pooled):
    """The proxy process and its children together."""

    def __init__(self, *attrs: str):
        self.parts = [Pooled(a) for a in attrs]

    def of(self, phases: list[Phase]) -> float:
        return sum(p.of(phases) for p in self.parts)


total_cpu_ms = PooledSum("cpu", "child_cpu")


def figure(t: Target, phase: str, fn) -> float:
    """Median across rounds, or the pooled value for CPU."""
    phases = t.results.get(phase, [])
    return fn.of(phases) if isinstance(fn, Pooled) else med([fn(p) for p in phases])


ROWS = [  # label, phase, per-round figure, format
    ("small JSON c1   req/s", "c1", rps, "{:.0f}"),
    ("small JSON c1   p50 ms", "c1", total_p50, "{:.2f}"),
    ("small JSON c1   p99 ms", "c1", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("small JSON c32  req/s", "c32", rps, "{:.0f}"),
    ("small JSON c32  p50 ms", "c32", total_p50, "{:.2f}"),
    ("small JSON c32  p99 ms", "c32", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("stream 200ch    TTFB p50 ms", "stream", ttfb_p50, "{:.2f}"),
    ("stream 200ch    TTFB p99 ms", "stream", lambda p: 1e3 * pct(p.ttfb, 0.99), "{:.2f}"),
    ("stream 200ch    total p50 ms", "stream", total_p50, "{:.2f}"),
    ("stream 200ch    total p99 ms", "stream", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("paced stream    TTFB p50 ms", "paced", ttfb_p50, "{:.2f}"),
    ("paced stream    total p50 ms", "paced", total_p50, "{:.2f}"),
    ("1 MB body c1    req/s", "upload", rps, "{:.1f}"),
    ("1 MB body c1    p50 ms", "upload", total_p50, "{:.2f}"),
    *((f"proxy CPU ms/req   {ph}", ph, cpu_ms, "{:.3f}") for ph in PHASES),
    *((f"  on loop thread   {ph}", ph, loop_cpu_ms, "{:.3f}") for ph in PHASES),
    *((f"capture writer CPU ms/req {ph}", ph, child_cpu_ms, "{:.3f}") for ph in PHASES),
]
LABEL_W = max(30, *(len(row[0]) + 1 for row in ROWS))


def report(targets: list[Target], cfg) -> bool:
    w = max(12, *(len(t.name) + 2 for t in targets))
    print(f"\n{'median of ' + str(cfg.rounds) + ' rounds':<{LABEL_W}}" + "".join(f"{t.name:>{w}}" for t in targets))
    for label, phase, fn, fmt in ROWS:
        values = [figure(t, phase, fn) for t in targets]
        print(f"{label:<{LABEL_W}}" + "".join(f"{'-' if v != v else fmt.format(v):>{w}}" for v in values))
    drains = [max(figure(t, ph, lambda p: 1e3 * p.drain) for ph in PHASES) for t in targets]
    print(f"{'drain after a phase, max ms':<{LABEL_W}}" + "".join(f"{d:>{w}.0f}" for d in drains))
    errors = [sum(p.errors for ps in t.results.values() for p in ps) for t in targets]
    print(f"{'failed requests':<{LABEL_W}}" + "".join(f"{e:>{w}}" for e in errors))
    print("  CPU: utime+stime per answered request, pooled over rounds, including the drain (the wait after\n"
          "  a phase until the proxy and its children used no CPU for 60 ms, i.e. the capture writer's\n"
          "  backlog). Proxy CPU: the proxy process (all threads; for ctxscope that includes the thread that\n"
          "  hands calls to the writer); loop thread: its main thread; capture writer CPU: the proxy's child\n"
          "  processes (ctxscope stores and analyses calls in one, at a lower priority).\n"
          "  Ratios and differences below are paired per round, then the median is taken.")
    ok = not any(errors)
    direct = targets[0]
    for loop in dict.fromkeys(t.loop for t in targets[1:]):
        mini = next(t for t in targets if t.kind == "minimal" and t.loop == loop)
        for ctx in (t for t in targets if t.loop == loop and t.kind in ("ctxscope", "nocapture")):
            print(f"\n{ctx.name} vs {mini.name} and direct:")
            for ph, what in (("c1", "small JSON c1"), ("c32", "small JSON c32"), ("upload", "1 MB body c1")):
                print(f"  throughput {what:<15} {paired(ctx, mini, ph, rps, _ratio):5.2f}x minimal "
                      f"{paired(ctx, direct, ph, rps, _ratio):5.2f}x direct "
                      f"(minimal: {paired(mini, direct, ph, rps, _ratio):.2f}x direct)")
            for ph, name, fn in (("stream", "TTFB p50", ttfb_p50), ("stream", "stream total p50", total_p50),
                                 ("paced", "paced TTFB p50", ttfb_p50)):
                print(f"  added {name:<17} {paired(ctx, direct, ph, fn, _diff):+6.2f} ms vs direct, "
                      f"{paired(ctx, mini, ph, fn, _diff):+6.2f} ms vs minimal "
                      f"(minimal adds {paired(mini, direct, ph, fn, _diff):+.2f} ms to direct)")
            print("  proxy CPU per request vs minimal: " + ", ".join(
                f"{ph} {_ratio(figure(ctx, ph, cpu_ms), figure(mini, ph, cpu_ms)):.2f}x" for ph in PHASES))
            print("  proxy + capture writer CPU per request vs minimal: " + ", ".join(
                f"{ph} {_ratio(figure(ctx, ph, total_cpu_ms), figure(mini, ph, total_cpu_ms)):.2f}x" for ph in PHASES))
            if ctx.kind == "ctxscope":
                print(f"  capture writer scheduling when idle: {ctx.sched}")
                ok &= check_capture(ctx)
    return ok


def check_capture(t: Target) -> bool:
    """Every call answered 200 through ctxscope must be in its capture DB with outcome ok."""
    ctl = str(VENV_BIN / "ctxscope")
    listed = subprocess.run([ctl, "calls", "--db", str(t.db), "--json", "--limit", "100000000"],
                            capture_output=True, text=True)
    status = subprocess.run([ctl, "db", "status", "--db", str(t.db), "--json"], capture_output=True, text=True)
    if listed.returncode or status.returncode:
        print(f"  capture check FAILED: {(listed.stderr or status.stderr).strip()[-800:]}")
        return False
    rows, st = json.loads(listed.stdout), json.loads(status.stdout)
    outcomes: dict[str, int] = {}
    for row in rows:
        outcomes[str(row.get("outcome"))] = outcomes.get(str(row.get("outcome")), 0) + 1
    failures = {k: v for k, v in (st.get("writer") or {}).items() if k != "last_error" and v}
    good = len(rows) == t.sent_ok and outcomes.get("ok", 0) == t.sent_ok and not failures
    print(f"  capture: {len(rows)} calls in the DB, {t.sent_ok} answered through {t.name} (outcomes {outcomes}; "
          f"writer failures {failures or 'none'}; DB {st.get('size_bytes', 0) / 2**20:.1f} MB) -> "
          f"{'none dropped' if good else 'MISMATCH'}")
    return good


def print_last_line(targets: list[Target]) -> None:
    """The pair on the loop the daemon itself picks (uvloop when installed)."""
    loop = targets[-1].loop
    direct = targets[0]
    mini = next(t for t in targets if t.kind == "minimal" and t.loop == loop)
    ctx = next(t for t in targets if t.kind == "ctxscope" and t.loop == loop)
    c1 = paired(ctx, mini, "c1", rps, _ratio)
    c32 = paired(ctx, mini, "c32", rps, _ratio)
    ttfb = paired(ctx, direct, "stream", ttfb_p50, _diff)
    met = c1 >= 0.8 and c32 >= 0.8 and ttfb <= 1.0
    print(f"targets (>= 0.80x minimal at c1 and c32; <= 1 ms TTFB p50 added vs direct): {'MET' if met else 'NOT MET'}")
    print(f"ratio vs minimal passthrough: c1 {c1:.2f}, c32 {c32:.2f}; added TTFB p50 {ttfb:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~20 s: 2 rounds, short phases")
    ap.add_argument("--rounds", type=int, help="measured rounds (default 6, quick 2)")
    ap.add_argument("--duration", type=float, help="seconds per closed-loop phase (default 1.0, quick 0.5)")
    ap.add_argument("--streams", type=int, help="streams per target per round (default 40, quick 15)")
    ap.add_argument("--loops", choices=("auto", "both"), default="auto",
                    help="proxies on the loop the daemon picks (auto) or on asyncio and uvloop side by side")
    ap.add_argument("--with-nocapture", action="store_true",
                    help="also run the daemon with its capture sink disabled, to split forwarding from capture cost")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, capture DBs) after a clean run")
    ap.add_argument("--role", choices=("upstream", "passthrough"), help=argparse.SUPPRESS)
    ap.add_argument("--loop", default="asyncio", help=argparse.SUPPRESS)
    ap.add_argument("--upstream-url", help=argparse.SUPPRESS)
    cfg = ap.parse_args()
    if cfg.role:
        run_loop(_serve_role(cfg.role, cfg.upstream_url), cfg.loop)
        return
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
