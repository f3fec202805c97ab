"""A real `ctxscope serve` in a process of its own, for tests that read its processes from /proc.

It is started by the installed `ctxscope` command (next to this Python), as a user starts it: that
entry point runs on uvloop, which `python -m ctxscope.main` would not show."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

CTXSCOPE = Path(sys.executable).parent / "ctxscope"  # the installed command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def writer_child(pid: int) -> int | None:
    """The writer child among serve ``pid``'s children, found in /proc (None before it starts)."""
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


@contextlib.contextmanager
def running_serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, str]]:
    """The INSTALLED `ctxscope serve --port P --db tmp_path/c.db *args` (on uvloop, as in
    production) with its own home, once it answers its status; ``env``: more variables for it.
    It is stopped with SIGTERM on the way out and must exit 0 (its log is the failure's message)."""
    port = free_port()
    env = dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home"), **(env or {}))
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(CTXSCOPE), "serve", "--port", str(port), "--db", str(tmp_path / "c.db"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx2.get(f"{base}/_ctxscope/api/status?store=0", timeout=1)
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "serve did not start: " + log.read_text()
                time.sleep(0.1)
        yield proc, base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, log.read_text()
