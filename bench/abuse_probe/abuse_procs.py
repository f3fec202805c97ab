"""The abuse bench's processes: ``ctxscope serve``, the background client, and RSS sampling."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from proxy_bench_procs import child_env, child_pids

HERE = Path(__file__).resolve().parent  # bench/abuse_probe
_VENV_CTXSCOPE = HERE.parent.parent / ".venv" / "bin" / "ctxscope"
CTXSCOPE = str(_VENV_CTXSCOPE if _VENV_CTXSCOPE.exists() else Path(sys.executable).with_name("ctxscope"))


class DaemonError(RuntimeError):
    """``ctxscope serve`` exited or did not listen; the message holds its log's tail."""


@dataclass
class Daemon:
    proc: subprocess.Popen
    port: int
    home: Path
    db: Path
    out: Path  # stdout (the announcement)
    err: Path  # stderr (logging)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in (self.out, self.err) if p.exists())

    def err_size(self) -> int:
        return self.err.stat().st_size if self.err.exists() else 0

    def err_since(self, offset: int) -> str:
        with open(self.err, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


def start_daemon(name: str, work: Path, home: Path, db: Path, upstreams: dict[str, str], config: Path | None) -> Daemon:
    """``ctxscope serve --port 0``; the port is read from the line it prints when it listens."""
    out, err = work / f"{name}.out", work / f"{name}.err"
    args = [CTXSCOPE, "serve", "--port", "0", "--db", str(db)]
    if config is not None:
        args += ["--config", str(config)]
    for up_name, url in upstreams.items():
        args += ["--upstream", f"{up_name}={url}"]
    env = child_env(home) | {"PYTHONUNBUFFERED": "1"}
    with open(out, "wb") as stdout, open(err, "wb") as stderr:  # the child keeps its own copies
        proc = subprocess.Popen(args, stdout=stdout, stderr=stderr, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        listening = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if listening:
            return Daemon(proc, int(listening.group(1)), home, db, out, err)
        if proc.poll() is not None:
            raise DaemonError(f"exited with {proc.returncode}: {(text + err.read_text(errors='replace'))[-1500:]}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise DaemonError("did not listen within 60 s")


def stop_daemon(daemon: Daemon, timeout: float = 120.0) -> str:
    """SIGTERM and wait: the daemon stores what it holds before it exits."""
    if daemon.proc.poll() is not None:
        return f"had already exited with {daemon.proc.returncode}"
    t0 = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    try:
        rc = daemon.proc.wait(timeout)
        return f"stopped with {rc} in {time.monotonic() - t0:.1f} s"
    except subprocess.TimeoutExpired:
        daemon.proc.kill()
        daemon.proc.wait()
        return f"did not stop within {timeout:.0f} s: killed"


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class Sample:
    t: float
    root: int
    root_kb: int
    children_kb: dict[int, int]


@dataclass
class RssSampler:
    """Samples the RSS of each daemon and of all its descendants every ``interval`` seconds."""

    interval: float = 0.02
    roots: list[int] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    peak_total_kb: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        deadline = time.monotonic() + 900  # bounded whatever happens to the run
        while not self._stop.is_set() and time.monotonic() < deadline:
            total = 0
            for root in list(self.roots):
                s = self.now(root)
                if s.root_kb:
                    self.samples.append(s)
                    total += s.root_kb + sum(s.children_kb.values())
            self.peak_total_kb = max(self.peak_total_kb, total)
            self._stop.wait(self.interval)

    @staticmethod
    def now(root: int) -> Sample:
        return Sample(time.monotonic(), root, rss_kb(root), {p: rss_kb(p) for p in child_pids(root)})

    def window(self, root: int, t0: float, t1: float) -> tuple[int, int, int]:
        """Peak KB in [t0, t1]: the daemon alone, its largest child, and all its children together."""
        own = child = kids = 0
        for s in self.samples:
            if s.root == root and t0 <= s.t <= t1:
                own = max(own, s.root_kb)
                child = max([child, *s.children_kb.values()])
                kids = max(kids, sum(s.children_kb.values()))
        return own, child, kids

    def child_growth(self, root: int, t0: float, t1: float) -> int:
        """The largest growth in KB of one child over [t0, t1] (its peak over its first sample there):
        what the window's work cost a child, not what earlier work left in it."""
        first: dict[int, int] = {}
        peak: dict[int, int] = {}
        for s in self.samples:
            if s.root == root and t0 <= s.t <= t1:
                for pid, kb in s.children_kb.items():
                    first.setdefault(pid, kb)
                    peak[pid] = max(peak.get(pid, 0), kb)
        return max([0, *(peak[pid] - first[pid] for pid in peak)])


@dataclass
class BgSample:
    start: float  # monotonic, in this process's clock (CLOCK_MONOTONIC is system-wide on Linux)
    latency_ms: float
    status: int  # 0: no answer
    tag: str


class Background:
    """The background process: the fast upstream and the legit client that calls through the proxy
    every 10 ms (a separate process, so the bench's own work never shows up as a stall)."""

    def __init__(self, env: dict[str, str]):
        script = HERE / "abuse_background.py"
        self.proc = subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
        )
        first = self.proc.stdout.readline()
        if not first.startswith("LISTENING "):
            self.proc.kill()
            raise RuntimeError(f"background process did not start: {first!r}")
        self.port = int(first.split()[1])
        self.samples: list[BgSample] = []
        self.sent = 0
        self.done = threading.Event()
        self._reader = threading.Thread(target=self._read, name="bg-reader", daemon=True)
        self._reader.start()

    @property
    def upstream(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] == "S" and len(parts) == 5:
                self.samples.append(BgSample(float(parts[1]), float(parts[2]), int(parts[3]), parts[4]))
            elif parts and parts[0] == "DONE":
                self.sent = int(parts[1])
                self.done.set()

    def _say(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def go(self, base_url: str) -> None:
        self._say("GO " + base_url)

    def stop_client(self, timeout: float = 30.0) -> None:
        self._say("STOP")
        self.done.wait(timeout)

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stall(self, t0: float, t1: float) -> float:
        """The longest latency of a background call that was in flight during [t0, t1], in ms."""
        return max(
            (s.latency_ms for s in list(self.samples) if s.start <= t1 and s.start + s.latency_ms / 1000 >= t0),
            default=0.0,
        )

    def max_stall(self, since: float = 0.0) -> float:
        return max((s.latency_ms for s in self.samples if s.start >= since), default=0.0)

    def tags(self) -> list[str]:
        return [s.tag for s in self.samples]

    def caught_up(self, t: float) -> bool:
        """A background call started after ``t`` has finished (so every call in flight at t is in)."""
        return any(s.start > t for s in self.samples[-50:])


def env_for(home: Path) -> dict[str, str]:
    return child_env(home) | {"PYTHONUNBUFFERED": "1"}
