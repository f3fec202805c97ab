#!/usr/bin/env python
"""ctxscope at scale: a large store, every read of it timed, and capture under sustained load.

1. Builds a store of ``--calls`` calls in ``--sessions`` sessions (default 100,000 in 1,000: growing
   Claude-Code-like conversations from ``bench/writer_cost.py``) through the writer's ingest (a
   ``CaptureWriter`` with the daemon's analyzers, as the writer child stores), plus one session
   growing to ``--big-tokens`` tokens (default 1M).
2. Starts the installed ``ctxscope serve`` on it and prints, for a typical session and the big one:
   CLI command times and peak RSS (``sessions``, ``calls``, ``stats``, ``search``, ``db status``,
   ``findings``, ``advise``, ``export --format har``), the JSON endpoints' time and bytes, page
   times in headless Chromium, and the daemon's RSS at rest, after the reads and 30 s later.
3. Sustained load: ``--senders`` SDK clients for ``--load-seconds`` beside ``--hogs`` CPU-hog
   processes, through a fresh daemon: calls sent and calls stored.

    .venv/bin/python bench/scale.py                                   # the full size (tens of minutes)
    .venv/bin/python bench/scale.py --calls 5000 --sessions 50 --big-tokens 200000 --load-seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy_probe"))

from writer_cost import Session, exchange

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.writer.storing.thread import CaptureWriter

BIN = Path(sys.executable).parent
CTXSCOPE = BIN / "ctxscope"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def build(db: Path, calls: int, sessions: int, big_tokens: int) -> tuple[str, str]:
    """The store; returns (a typical session's name, the big session's name)."""
    writer = CaptureWriter(db, analyzers=writer_analyzers(), status_file=False, keep_unstored=False)
    writer.start()
    began = time.monotonic()
    per = max(1, calls // sessions)
    try:
        for s in range(sessions):
            session = Session(s, 3000, new_words=120)
            name = f"scale{s:05d}"
            for i in range(per):
                writer.submit(exchange(name, i, session.next_body()))
            while writer.stats().queued > 2000:
                time.sleep(0.05)
            if s % max(1, sessions // 10) == 0:
                print(f"  built {s * per:,} calls ({time.monotonic() - began:.0f} s)", flush=True)
        big = Session(10_000_000, 20_000, new_words=600)
        i = 0
        while big.tokens < big_tokens:
            writer.submit(exchange("scalebig", i, big.next_body()))
            i += 1
            while writer.stats().queued > 8:
                time.sleep(0.01)
        while writer.stats().queued:
            time.sleep(0.1)
    finally:
        writer.stop()
    stored = sqlite3.connect(db).execute("select count(*) from calls").fetchone()[0]
    print(
        f"store: {stored:,} calls ({per * sessions:,} in {sessions} sessions + {i} in a {big.tokens:,}-token session)"
        f" built in {time.monotonic() - began:.0f} s; {db.stat().st_size / 2**20:.0f} MB"
    )
    return "scale00000", "scalebig"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss(pid: int) -> int:
    """RSS in bytes of a process and its children."""
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
        for _ in range(300):
            try:
                self.get("/_ctxscope/api/status?store=0")
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("serve did not start")

    def get(self, path: str, timeout: float = 600) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
            return r.read()

    def stop(self) -> float:
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        self.log.close()
        return time.monotonic() - began


def cli(daemon: Daemon, *args: str) -> tuple[float, int, int]:
    """Seconds, peak RSS (bytes) and output bytes of one CLI command. The peak is the child's own
    VmHWM, read until it exits: ``wait4``'s ``ru_maxrss`` counts the parent's pages the forked
    child had before its ``exec``."""
    began = time.monotonic()
    peak = 0
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([str(CTXSCOPE), *args], env=daemon.env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.02)
        size = out.seek(0, 2)
    return time.monotonic() - began, peak, size


def reads(daemon: Daemon, session: str, label: str, out_dir: Path) -> None:
    db = str(daemon.db)
    print(f"\n{label} session {session}: CLI (seconds, peak RSS)")
    for args in (
        ("sessions",),
        ("calls", "--session", session),
        ("stats",),
        ("search", "cache"),
        ("db", "status"),
        ("findings", session),
        ("advise", session),
        ("export", session, "--format", "har", "-o", str(out_dir / f"{label}.har")),
    ):
        t, rss, _ = cli(daemon, *args, "--db", db)
        print(f"  {' '.join(args[:2]):<24} {t:7.2f} s  {rss / 2**20:7.0f} MB")
    har = out_dir / f"{label}.har"
    if har.exists():
        print(f"  (export wrote {har.stat().st_size / 2**20:.1f} MB)")
    q = urllib.parse.quote(session)
    view = json.loads(daemon.get(f"/_ctxscope/api/session?s={q}&limit=100000"))
    rows = sorted(view.get("calls") or [], key=lambda r: r.get("started_at") or "")
    first = rows[0]["id"] if rows else ""
    last = rows[-1]["id"] if rows else ""
    print(f"{label}: JSON endpoints (seconds, bytes)")
    for path in (
        "/_ctxscope/api/sessions",
        f"/_ctxscope/api/session?s={q}",
        f"/_ctxscope/api/findings?s={q}",
        f"/_ctxscope/api/advice?s={q}",
        f"/_ctxscope/api/call?id={last}",
        f"/_ctxscope/api/diff?id={last}&base={first}",
    ):
        began = time.monotonic()
        try:
            size = len(daemon.get(path))
        except OSError as exc:
            size = -1
            print(f"  {path[12:60]:<48} failed: {exc}")
            continue
        print(f"  {path[12:60]:<48} {time.monotonic() - began:7.2f} s  {size:>12,} B")
    print(f"{label}: pages in headless Chromium (seconds until the page says it is ready, a fresh context each)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for page_path in (f"/#/session/{q}", f"/#/call/{last}", f"/#/diff/{last}/{first}"):
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            began = time.monotonic()
            try:
                page.goto(daemon.base + page_path)
                page.wait_for_selector("#app[data-ready='1']", timeout=120_000)
                took = f"{time.monotonic() - began:7.2f} s"
            except Exception as exc:
                took = f"not ready ({type(exc).__name__})"
            heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
            print(f"  {page_path[:48]:<48} {took}  JS heap {heap / 2**20:.1f} MB")
            ctx.close()
        browser.close()


def sustained(tmp: Path, senders: int, seconds: float, hogs: int) -> None:
    import openai

    home = tmp / "load-home"
    home.mkdir()
    daemon = Daemon(home, tmp / "load.db")
    rng = random.Random(41)
    words = ["parse", "module", "cache", "token", "review", "function", "error", "path", "test", "branch"]
    hog_procs: list[subprocess.Popen] = []
    sent: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def send() -> None:
        client = openai.OpenAI(base_url=f"{daemon.base}/u/sim/v1", api_key="sk-bench", max_retries=0, timeout=60)
        n = 0
        while not stop.is_set():
            try:
                text = " ".join(rng.choice(words) for _ in range(1500))
                client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": text}])
                n += 1
            except Exception as exc:
                errors.append(repr(exc))
        sent.append(n)

    try:
        daemon.get("/u/sim/v1/models")  # the simulator's child starts (a call, stored too)
        hog_procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        threads = [threading.Thread(target=send) for _ in range(senders)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    finally:
        for h in hog_procs:
            h.kill()
            h.wait()
    total = sum(sent)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        w = json.loads(daemon.get("/_ctxscope/api/status"))["writer"]
        if w["written"] >= total or w["dropped"]:
            break
        time.sleep(0.5)
    daemon.stop()
    stored = sqlite3.connect(tmp / "load.db").execute("select count(*) from calls").fetchone()[0]
    print(
        f"\nsustained load: {senders} senders for {seconds:.0f} s beside {hogs} CPU hogs: {total:,} calls sent, "
        f"{stored - 1:,} stored (besides the warm-up call), {w['dropped']} dropped, {len(errors)} client errors"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--big-tokens", type=int, default=1_000_000)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--load-seconds", type=float, default=60)
    ap.add_argument("--keep", type=Path, help="build the store here (reused if it exists)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        db = (args.keep or tmp) / "scale.db"
        if not db.exists():
            db.parent.mkdir(parents=True, exist_ok=True)
            typical, big = build(db, args.calls, args.sessions, args.big_tokens)
        else:
            typical, big = "scale00000", "scalebig"
        home = tmp / "home"
        home.mkdir()
        daemon = Daemon(home, db)
        try:
            time.sleep(5)
            resting = tree_rss(daemon.proc.pid)
            print(f"\ndaemon RSS at rest: {resting / 2**20:.0f} MB")
            reads(daemon, typical, "typical", tmp)
            reads(daemon, big, "big", tmp)
            after = tree_rss(daemon.proc.pid)
            time.sleep(30)
            later = tree_rss(daemon.proc.pid)
            print(
                f"\ndaemon RSS: at rest {resting / 2**20:.0f} MB, after the reads {after / 2**20:.0f} MB, "
                f"30 s later {later / 2**20:.0f} MB ({later / max(1, resting):.2f}x rest)"
            )
        finally:
            print(f"SIGTERM to exit: {daemon.stop():.1f} s")
        sustained(tmp, args.senders, args.load_seconds, args.hogs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
