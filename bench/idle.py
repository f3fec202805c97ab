"""CPU of an idle ``ctxscope serve``: no traffic, no page open, nothing should wake up.

Run from the repository: ``.venv/bin/python bench/idle.py [--seconds 30] [--settle 5] [--otlp-endpoint URL]``.
Starts a real daemon (port 0, a temporary CTXSCOPE_HOME), lets it settle, then reads utime+stime of every process
in its tree from /proc at the start and the end of the window. A daemon left running all day on a
laptop must not burn CPU while nothing happens (docs/architecture.md, "A quiet idle daemon").

The last line: ``idle: P% of one core over N s (daemon A ms, writer B ms, simulator C ms)``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, utime+stime ticks, name) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[11]) + int(rest[12]), _role(cmd)


def _role(cmd: str) -> str:
    if "resource_tracker" in cmd:
        return "resource tracker"  # multiprocessing's helper: none since the writer child is started without it
    if "ctxscope.inspector.writer.child.entry" in cmd:
        return "writer"
    if "simulator" in cmd:
        return "simulator"
    return "daemon"


def tree(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (CPU ticks, role) of ``root`` and every process below it."""
    procs: dict[int, tuple[int, int, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            procs[int(name)] = st
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out[pid] = procs[pid][1:]
            todo.extend(p for p, st in procs.items() if st[0] == pid)
    return out


def measure(seconds: float, settle: float, extra: tuple[str, ...] = ()) -> tuple[float, dict[str, float]]:
    """(% of one core, ms of CPU per process role) of an idle serve over ``seconds``."""
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, CTXSCOPE_HOME=home)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxscope.main", "serve", "--port", "0", *extra],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(settle)
            before = tree(proc.pid)
            began = time.monotonic()
            time.sleep(seconds)
            after = tree(proc.pid)
            took = time.monotonic() - began
            labels = {pid: role for pid, (_, role) in after.items()}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    per: dict[str, float] = {}
    for pid, (ticks, role) in after.items():
        used = (ticks - before.get(pid, (0, role))[0]) * TICK_MS
        label = labels[pid]
        per[label] = per.get(label, 0.0) + used
    return sum(per.values()) / (took * 1000) * 100, per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--otlp-endpoint", default=None, help="measure with the OTLP export configured too")
    args = parser.parse_args()
    extra = ("--otlp-endpoint", args.otlp_endpoint) if args.otlp_endpoint else ()
    share, per = measure(args.seconds, args.settle, extra)
    for label, ms in sorted(per.items()):
        print(f"{label}: {ms:.0f} ms in {args.seconds:.0f} s ({ms * 60 / args.seconds:.0f} ms per minute)")
    print(
        f"idle: {share:.2f}% of one core over {args.seconds:.0f} s (daemon {per.get('daemon', 0):.0f} ms, "
        f"writer {per.get('writer', 0):.0f} ms, simulator {per.get('simulator', 0):.0f} ms)"
    )


if __name__ == "__main__":
    main()
