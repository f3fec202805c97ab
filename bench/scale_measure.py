"""The scale bench's reads: the installed CLI, the daemon's JSON endpoints and the pages in Chromium.

Every figure goes into ``Figures`` as well as onto stdout, so ``scale.py`` can judge the held-out
targets (PASS/FAIL lines) from what was printed. A CLI command's peak is its own ``VmHWM``, read
until it exits: ``wait4``'s ``ru_maxrss`` counts the pages the bench's own process had when it
forked the child, before its ``exec``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGE_TIMEOUT_MS = 300_000
CAP = [600.0]  # seconds a CLI command or an endpoint may take before it is stopped and reported so (--cap)


@dataclass
class Figures:
    """What was measured, by a key such as ``("cli", "long", "findings")``: seconds, bytes or MB."""

    seconds: dict[tuple[str, ...], float] = field(default_factory=dict)
    size: dict[tuple[str, ...], int] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss(pid: int) -> int:
    """RSS in bytes of a process and its children (the daemon and its writer child)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return total


class Daemon:
    """The installed ``ctxscope serve`` on a store, its log beside ``home``."""

    def __init__(self, home: Path, db: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, CTXSCOPE_HOME=str(home), CTXSCOPE_DAEMON=self.base)
        self.log = open(home.parent / f"serve-{self.port}.log", "w")  # noqa: SIM115
        self.db = db
        self.proc = subprocess.Popen(
            [str(CTXSCOPE), "serve", "--port", str(self.port), "--db", str(db)],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        for _ in range(600):
            try:
                self.get("/_ctxscope/api/status?store=0")
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        raise SystemExit(f"serve did not start (see {self.log.name})")

    def get(self, path: str, timeout: float | None = None) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=timeout or CAP[0]) as r:
            return r.read()

    def rss(self) -> int:
        return tree_rss(self.proc.pid)

    def stop(self) -> float:
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        self.log.close()
        return time.monotonic() - began


def cli(env: dict[str, str], *args: str) -> tuple[float, int, int]:
    """Seconds, peak RSS (bytes) and output bytes of one installed CLI command."""
    began = time.monotonic()
    peak = 0
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([str(CTXSCOPE), *args], env=env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            if time.monotonic() - began > CAP[0]:
                proc.kill()
                proc.wait()
                print(f"    ({' '.join(args[:2])} stopped after {CAP[0]:.0f} s)")
                return float("inf"), peak, out.seek(0, 2)
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.01)
        size = out.seek(0, 2)
        if proc.returncode:
            out.seek(0)
            tail = out.read()[-300:].decode(errors="replace").strip().splitlines()
            print(f"    ({' '.join(args[:2])} exited {proc.returncode}: {tail[-1] if tail else ''})")
    return time.monotonic() - began, peak, size


def cli_baseline(env: dict[str, str]) -> int:
    """Peak RSS of the CLI doing nothing (``ctxscope --version``): what a command's ``+MB`` is above."""
    return min(cli(env, "--version")[1] for _ in range(3))


def store_cli(daemon: Daemon, figures: Figures) -> None:
    """The whole store's commands."""
    db = str(daemon.db)
    base = cli_baseline(daemon.env)
    figures.size["cli", "baseline"] = base
    print(f"\nwhole store: CLI (seconds, peak RSS; `ctxscope --version` peaks at {base / 2**20:.0f} MB)")
    for args in (("sessions",), ("stats",), ("search", "cache"), ("db", "status")):
        t, rss, out = cli(daemon.env, *args, "--db", db)
        figures.seconds["cli", "store", args[0]] = t
        print(f"  {' '.join(args):<28} {t:7.2f} s  {rss / 2**20:6.0f} MB  ({out:,} B out)")


def session_cli(daemon: Daemon, session: str, label: str, out_dir: Path, figures: Figures) -> None:
    """One session's commands; the ``+MB`` is above the baseline of ``store_cli``."""
    db = str(daemon.db)
    base = figures.size["cli", "baseline"]
    har = out_dir / f"{label}.har"
    print(f"\n{label} session {session}: CLI (seconds, peak RSS, +MB above the bare CLI)")
    for args in (
        ("calls", "--session", session),
        ("findings", session),
        ("advise", session),
        ("export", session, "--format", "har", "-o", str(har)),
    ):
        t, rss, _ = cli(daemon.env, *args, "--db", db)
        figures.seconds["cli", label, args[0]] = t
        figures.size["cli", label, args[0]] = rss - base
        print(f"  {args[0]:<28} {t:7.2f} s  {rss / 2**20:6.0f} MB  +{(rss - base) / 2**20:.0f} MB")
    if har.exists():
        print(f"  (export wrote {har.stat().st_size / 2**20:.1f} MB)")
        har.unlink()


def session_ends(daemon: Daemon, session: str) -> tuple[str, str]:
    """The first and the last call of a session (the calls table is newest first by default)."""
    q = urllib.parse.quote(session)
    view = json.loads(daemon.get(f"/_ctxscope/api/session?s={q}&limit=100000"))
    rows = sorted(view.get("calls") or [], key=lambda r: r.get("started_at") or "")
    return (rows[0]["id"], rows[-1]["id"]) if rows else ("", "")


def endpoints(daemon: Daemon, session: str, label: str, figures: Figures) -> tuple[str, str]:
    """The JSON endpoints the UI reads for a session; returns its first and last call."""
    first, last = session_ends(daemon, session)
    q = urllib.parse.quote(session)
    print(f"{label}: JSON endpoints (seconds, bytes)")
    for key, path in (
        ("sessions", "/_ctxscope/api/sessions"),
        ("session", f"/_ctxscope/api/session?s={q}"),
        ("findings", f"/_ctxscope/api/findings?s={q}"),
        ("advice", f"/_ctxscope/api/advice?s={q}"),
        ("call", f"/_ctxscope/api/call?id={last}"),
        ("diff", f"/_ctxscope/api/diff?id={last}&base={first}"),
    ):
        began = time.monotonic()
        try:
            size = len(daemon.get(path))
        except OSError as exc:
            print(f"  {key:<10} {path[14:64]:<50} failed: {exc}")
            continue
        took = time.monotonic() - began
        figures.seconds["api", label, key] = took
        figures.size["api", label, key] = size
        print(f"  {key:<10} {path[14:64]:<50} {took:7.2f} s  {size:>12,} B")
    return first, last


FINDINGS_SHOWN = ".card.findings .card-title:has-text('Findings (')"  # the panel has read the findings
APP_READY = "#app[data-ready='1']"  # the view's first screen is drawn


def pages(daemon: Daemon, views: list[tuple[str, str, str]], figures: Figures) -> None:
    """Each view (key, hash path, the selector that says it is ready) in a fresh Chromium context:
    seconds until ready, and the page's JS heap. Selectors, not JS expressions: the UI's content
    security policy forbids evaluating strings."""
    from playwright.sync_api import sync_playwright

    print("pages in headless Chromium (seconds until ready, a fresh context each)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for key, hash_path, ready in views:
                ctx = browser.new_context(viewport={"width": 1280, "height": 900})
                page = ctx.new_page()
                began = time.monotonic()
                try:
                    page.goto(daemon.base + "/" + hash_path)
                    page.wait_for_selector(ready, timeout=PAGE_TIMEOUT_MS)
                    took = time.monotonic() - began
                    figures.seconds["page", key] = took
                    shown = f"{took:7.2f} s"
                except Exception as exc:
                    shown = f"not ready ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"
                heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
                print(f"  {key:<22} {hash_path[:50]:<50} {shown}  JS heap {heap / 2**20:.1f} MB")
                ctx.close()
        finally:
            browser.close()
