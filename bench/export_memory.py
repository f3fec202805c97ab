#!/usr/bin/env python
"""What a session's export costs in memory: a 100-call agent session (``analysis.py``'s bodies,
each the previous prompt plus a few KB) stored through the writer's ingest with the daemon's
analyzers, then the installed ``ctxscope export`` in each ``--format``, each in its own process
under ``/usr/bin/time -v`` (wall seconds, CPU seconds, peak RSS, the file's size).

The baseline is the same command exporting a one-call session from the same store: the figure
that matters is the peak over it (docs/architecture.md, "Export and import go through the
writer's ingest").

    .venv/bin/python bench/export_memory.py                  # ~35 MB of request bytes
    .venv/bin/python bench/export_memory.py --tokens 560000  # ~115 MB
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from analysis import exchange, session_bodies  # noqa: E402

from ctxscope.inspector.pipeline.search_index import writer_analyzers  # noqa: E402
from ctxscope.inspector.store import db as store  # noqa: E402
from ctxscope.inspector.store.ingest import IngestState, ingest  # noqa: E402

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
FORMATS = ("har", "bundle", "transcript-md", "transcript-jsonl")


def build(path: Path, calls: int, tokens: int) -> tuple[str, str, int]:
    """Store the session and a one-call session; (big session, small session, request bytes sent)."""
    analyzers = writer_analyzers()
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    sent = 0
    for i, body in enumerate(session_bodies(calls, tokens)):
        body["system"][0]["text"] += " — ✓ 😀"  # UTF-8 as a JavaScript client sends it
        raw = json.dumps(body, ensure_ascii=False).encode()
        sent += len(raw)
        db.execute("BEGIN IMMEDIATE")
        ingest(db, exchange(i, raw), state, analyzers)
        db.execute("COMMIT")
    lone = exchange(calls + 1, json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": []}).encode())
    lone = dataclasses.replace(lone, session_label="lone", started_at=lone.started_at + 10_000)
    db.execute("BEGIN IMMEDIATE")
    ingest(db, lone, state, analyzers)
    db.execute("COMMIT")
    big = db.execute("SELECT session FROM calls GROUP BY session ORDER BY COUNT(*) DESC LIMIT 1").fetchone()[0]
    small = db.execute("SELECT session FROM calls GROUP BY session ORDER BY COUNT(*) ASC LIMIT 1").fetchone()[0]
    db.close()
    return big, small, sent


def measure(db: Path, session: str, fmt: str, out: Path) -> dict:
    """One export in its own process: wall s, CPU s, peak RSS MB, file MB."""
    cmd = ["/usr/bin/time", "-v", str(CTXSCOPE), "export", session, "--db", str(db), "--format", fmt, "-o", str(out)]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.monotonic() - start
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1)) / 1024
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", done.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", done.stderr).group(1))
    return {"wall": wall, "cpu": user + system, "rss": rss, "file": out.stat().st_size / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=175_000, help="the last call's prompt, about")
    parser.add_argument("--formats", default=",".join(FORMATS), help="which, comma separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "capture.db"
        big, small, sent = build(db, args.calls, args.tokens)
        print(f"session of {args.calls} calls, {sent / 1e6:.1f} MB sent; db {db.stat().st_size / 1e6:.1f} MB")
        print(
            f"{'format':18} {'baseline MB':>11} {'peak MB':>8} {'over MB':>8} {'file MB':>8} {'wall s':>7} {'CPU s':>6}"
        )
        for fmt in args.formats.split(","):
            base = measure(db, small, fmt, Path(tmp) / f"small.{fmt}")
            m = measure(db, big, fmt, Path(tmp) / f"big.{fmt}")
            print(
                f"{fmt:18} {base['rss']:11.0f} {m['rss']:8.0f} {m['rss'] - base['rss']:8.0f} "
                f"{m['file']:8.1f} {m['wall']:7.1f} {m['cpu']:6.1f}"
            )


if __name__ == "__main__":
    main()
