#!/usr/bin/env python
"""What a session's findings cost to read: a 1,000-call agent session (``analysis.py``'s, growing
to ~100K tokens) stored through the writer's ingest with the daemon's analyzers.

Printed: the writer's CPU per call for the findings facts (``FindingsRecorder``) beside the whole
ingest's; then the installed ``ctxscope findings SESSION --json`` run three ways, each in its own
process under ``/usr/bin/time -v`` (wall seconds, peak RSS): from the stored facts (what ships),
from the bodies once for a store without facts (the lazy backfill, which stores them), and the
findings as computed before they were stored (every body loaded and canonicalised,
``tests/support/legacy_findings.py``); and the daemon's findings API for the session, through a
real ``ctxscope serve``.

    .venv/bin/python bench/findings.py              # ~3 minutes on 2 cores
    .venv/bin/python bench/findings.py --calls 300
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from analysis import exchange, session_bodies  # noqa: E402

from ctxscope.inspector.pipeline import findings_record  # noqa: E402
from ctxscope.inspector.pipeline.search_index import writer_analyzers  # noqa: E402
from ctxscope.inspector.store import db as store  # noqa: E402
from ctxscope.inspector.store.ingest import IngestState, ingest  # noqa: E402

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
BEFORE = """
import sys, json
sys.path.insert(0, {tests!r})
from support import legacy_findings
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.store import queries
s = load_session(queries.open_db({db!r}), {session!r})
print(json.dumps([f.as_dict() for f in legacy_findings.findings(s)])[:80])
"""


def build(path: Path, calls: int, tokens: int) -> tuple[float, float, str]:
    """Store the session; (ingest CPU ms per call, of which the findings facts, the session id)."""
    analyzers = writer_analyzers()
    recorder = next(a for a in analyzers if isinstance(a, findings_record.FindingsRecorder))
    spent = [0.0]
    take = recorder.take

    def timed_take(*a):
        start = time.process_time()
        try:
            return take(*a)
        finally:
            spent[0] += time.process_time() - start

    recorder.take = timed_take  # type: ignore[method-assign]
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    start = time.process_time()
    for i, body in enumerate(session_bodies(calls, tokens)):
        db.execute("BEGIN IMMEDIATE")
        ingest(db, exchange(i, json.dumps(body).encode()), state, analyzers)
        db.execute("COMMIT")
    total = time.process_time() - start
    session = db.execute("SELECT session FROM calls LIMIT 1").fetchone()[0]
    db.close()
    return total * 1000 / calls, spent[0] * 1000 / calls, session


def measured(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MB, stdout) of a command under /usr/bin/time -v."""
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time .*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    user = re.search(r"User time \(seconds\): ([\d.]+)", done.stderr)
    system = re.search(r"System time \(seconds\): ([\d.]+)", done.stderr)
    assert wall and rss and user and system, done.stderr
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    return seconds, float(user.group(1)) + float(system.group(1)), int(rss.group(1)) / 1024, done.stdout


def api(path: Path, session: str) -> tuple[list[float], int]:
    """(seconds of three requests, bytes) of the daemon's findings API for the session, through a real serve."""
    import httpx2

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / "c.db")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        serve = [str(Path(sys.executable).parent / "ctxscope"), "serve", "--port", str(port), "--db", f"{tmp}/c.db"]
        env = dict(os.environ, CTXSCOPE_HOME=f"{tmp}/home")
        proc = subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:  # the installed daemon, once it answers its status
                try:
                    httpx2.get(f"{base}/_ctxscope/api/status?store=0", timeout=1)
                    break
                except httpx2.TransportError:
                    assert time.monotonic() < deadline and proc.poll() is None, "serve did not start"
                    time.sleep(0.1)
            took = []
            for _ in range(3):  # the first opens the daemon's read connection
                start = time.monotonic()
                r = httpx2.get(f"{base}/_ctxscope/api/findings", params={"s": session}, timeout=600)
                took.append(time.monotonic() - start)
                assert r.status_code == 200, r.text
            return took, len(r.content)
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=100_000, help="context size reached by the last call")
    ap.add_argument("--no-before", action="store_true", help="skip the findings as computed before (minutes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.db"
        per_call, facts_ms, session = build(path, args.calls, args.tokens)
        size = path.stat().st_size / 2**20
        print(
            f"{args.calls} calls to ~{args.tokens} tokens stored ({size:.0f} MB): ingest {per_call:.2f} ms/call CPU, "
            f"of which findings facts {facts_ms:.3f} ms/call"
        )
        cli = [str(CTXSCOPE), "findings", session, "--db", str(path), "--json"]
        wall, cpu, rss, _ = measured(cli)
        print(f"ctxscope findings from stored facts:          {wall:6.2f} s wall {cpu:6.2f} s CPU {rss:5.0f} MB peak")
        raw = sqlite3.connect(path)
        raw.execute("DELETE FROM call_findings")
        raw.commit()
        raw.close()
        wall, cpu, rss, _ = measured(cli)
        print(f"ctxscope findings, store without facts (once): {wall:6.2f} s wall {cpu:6.2f} s CPU {rss:5.0f} MB peak")
        wall, cpu, rss, _ = measured(cli)
        print(f"ctxscope findings, the read after it:          {wall:6.2f} s wall {cpu:6.2f} s CPU {rss:5.0f} MB peak")
        code = BEFORE.format(tests=str(HERE.parent / "tests"), db=str(path), session=session)
        wall, cpu, rss, _ = measured([sys.executable, "-c", code]) if not args.no_before else (0, 0, 0, "")
        print(f"findings as computed before (every body):      {wall:6.2f} s wall {cpu:6.2f} s CPU {rss:5.0f} MB peak")
        took, size_b = api(path, session)
        times = " / ".join(f"{t:.2f}" for t in took)
        print(f"daemon's findings API (a real serve): {times} s, {size_b / 1024:.0f} KB")


if __name__ == "__main__":
    main()
