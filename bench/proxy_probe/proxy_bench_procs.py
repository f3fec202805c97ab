"""The proxy bench's processes: starting the servers and ``ctxscope serve``, and their CPU figures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy_bench_load import Phase

VENV_BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
WIRE = Path(__file__).with_name("proxy_bench_wire.py")


# `ctxscope serve` picks uvloop whenever it imports; hiding the module forces plain asyncio.
_NO_UVLOOP = "import sys; sys.modules['uvloop'] = None\n"
# --with-nocapture: the same daemon with the capture sink's submit made a no-op (forwarding alone),
# whichever sink it uses (the writer thread or the writer's child process). Its ``expect`` too: a
# child that gets no work goes after a minute, and each request would start a new one.
_NO_CAPTURE = (
    "import ctxscope.inspector.writer.storing.thread as w\n"
    "import ctxscope.inspector.writer.daemon_side.supervisor as wp\n"
    "w.CaptureWriter.submit = wp.WriterProcess.submit = lambda self, exchange: None\n"
    "wp.WriterProcess.expect = lambda self: None\n"
)
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
    rss: dict[str, float] = field(default_factory=dict)  # MB by process of its tree after the rounds
    rss_released: dict[str, float] = field(default_factory=dict)  # ... once its writer child's idle release ran
    idle: float | None = None  # % of one core its tree used while no traffic flowed, after the rounds
    sent_ok: int = 0
    results: dict[str, list[Phase]] = field(default_factory=dict)

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
    """Every descendant of a process (ctxscope's capture writer child, its simulator child)."""
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
    return {0: f"ordinary scheduling, nice {nice}", 3: f"batch, nice {nice}", 5: "idle class"}.get(
        policy, f"policy {policy}"
    )


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss(pid: int) -> dict[str, float]:
    """RSS in MB of a process and each of its descendants, by command (the daemon, its writer child,
    the simulator when it was started; a resource tracker would be multiprocessing's, which ctxscope
    no longer uses)."""
    out: dict[str, float] = {}
    for p in [pid, *child_pids(pid)]:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        role = (
            "writer child"
            if "ctxscope.inspector.writer.child.entry" in cmd
            else "resource tracker"
            if "resource_tracker" in cmd
            else "simulator"
            if "ctxscope.simulator" in cmd
            else "daemon"
            if p == pid
            else "other"
        )
        out[role] = out.get(role, 0.0) + rss_mb(p)
    return out


async def idle_share(pid: int, seconds: float) -> float:
    """% of one core the process tree used over ``seconds`` with no traffic (as bench/idle.py reads it)."""
    before, t0 = cpu_seconds(pid) + children_cpu(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return 100 * (cpu_seconds(pid) + children_cpu(pid) - before) / (time.monotonic() - t0)


def children_cpu(pid: int) -> float:
    """CPU seconds of a process's living descendants (a child that exits takes its figure along)."""
    total = 0.0
    for kid in child_pids(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(kid)
    return total


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(CTXSCOPE_HOME=str(home), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


def spawn_role(role: str, loop: str, env, log: Path, upstream: str | None = None) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, str(WIRE), "--role", role, "--loop", loop] + (
        ["--upstream-url", upstream] if upstream else []
    )
    with open(log, "wb") as errors:  # the child keeps its own copy
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, env=env, text=True)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        raise SystemExit(f"{role} failed to start:\n{log.read_text()}")
    return proc, int(line.split()[1])


def closed_port() -> int:
    """A loopback port nothing listens on (just freed by the kernel): connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ctxscope(kind: str, loop: str, upstream: str, work: Path, env) -> tuple[subprocess.Popen, int, Path]:
    """``ctxscope serve`` on a port the kernel picks (a port picked here could be taken before the
    daemon binds it); the port is read from the line the daemon prints when it listens."""
    db = work / f"{kind}-{loop}.db"
    args = ["serve", "--port", "0", "--db", str(db), "--upstream", f"fast={upstream}"]
    if kind == "otlp-down":  # export on, to a collector that refuses every connection
        args += ["--otlp-endpoint", f"http://127.0.0.1:{closed_port()}"]
    prelude = (_NO_UVLOOP if loop == "asyncio" else "") + (_NO_CAPTURE if kind == "nocapture" else "")
    cmd = [sys.executable, "-c", prelude + _MAIN, *args] if prelude else [str(VENV_BIN / "ctxscope"), *args]
    log = work / f"{kind}-{loop}.log"
    with open(log, "wb") as output:  # the child keeps its own copy
        proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, env=env)
    return proc, listening_port(proc, log), db


def listening_port(proc: subprocess.Popen, log: Path) -> int:
    """The port ``ctxscope serve`` says it listens on, read from its log (it exits the bench if the
    daemon dies or says nothing within 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ctxscope serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        listening = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
        if listening:
            return int(listening.group(1))
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


def tree_cpu(pids: list[int]) -> list[float]:
    return [cpu_seconds(p) + children_cpu(p) for p in pids]


async def settle(pids: list[int], backlog=None, cap: float = 600.0) -> float:
    """Wait until no proxy nor any of its children burns CPU for 60 ms and ``backlog()`` (the
    capture writers' calls not yet stored) is 0: a writer that waits for a pause before it stores
    is idle for a moment after the traffic stops, and its work must not fall into the next phase."""
    t0 = time.perf_counter()
    last, still = tree_cpu(pids), 0
    while time.perf_counter() - t0 < cap:
        await asyncio.sleep(0.02)
        now = tree_cpu(pids)
        still = still + 1 if now == last else 0
        last = now
        if still >= 3 and (backlog is None or await backlog() == 0):
            break
    return time.perf_counter() - t0


async def after_idle_release(session, t: Target, cap: float) -> dict[str, float]:
    """The tree's RSS once ctxscope's writer child has let go of its caches and exited (it does
    after a minute without calls; the next call starts a new one: docs/architecture.md, "Memory");
    empty if that did not happen within ``cap`` s."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        async with session.get(t.base.split("/u/")[0] + "/_ctxscope/api/status?store=0") as r:
            writer = (await r.json())["writer"]
        if writer.get("idle_releases", 0) > 0 and writer.get("asleep"):
            while t.proc is not None and "writer child" in tree_rss(t.proc.pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # told to stop: it exits in a moment
            return tree_rss(t.proc.pid) if t.proc is not None else {}
        await asyncio.sleep(1.0)
    return {}


async def capture_backlog(session, targets: list[Target]) -> int:
    """Calls every ctxscope target has answered but not yet stored (its writer's queue and spool)."""
    total = 0
    for t in targets:
        if t.kind in ("ctxscope", "otlp-down"):
            async with session.get(t.base.split("/u/")[0] + "/_ctxscope/api/status?store=0") as r:
                total += (await r.json())["writer"]["queued"]
    return total
