"""The installed `ctxscope export --format har` of a ~100 MB agent session (100 calls, each the
previous prompt plus ~20 KB, UTF-8 beyond ASCII as a JavaScript client sends it) peaks under
+150 MB over the same command exporting a one-call session (``share/har_writer.py``; it was
+1.2 GB), and the file it writes is the whole session, valid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.ingest import IngestState, ingest

from support.factories import anthropic_request, make_exchange

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
CALLS, GROWTH = 100, 20_000
LIMIT_MB = 150
PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _session(path: Path) -> tuple[int, bytes]:
    """Store the big session and a one-call one through the writer's ingest; (request bytes sent,
    the last request)."""
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    messages: list[dict] = []
    sent = 0
    for i in range(CALLS):
        messages.append({"role": "user", "content": f"step {i} — ✓ 😀 " + f"tool output line {i} " * (GROWTH // 20)})
        body = json.dumps(anthropic_request(messages), ensure_ascii=False).encode()
        sent += len(body)
        db.execute("BEGIN IMMEDIATE")
        ingest(db, make_exchange(session_label="big", request_body=body), state)
        db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    ingest(db, make_exchange(session_label="lone"), state)
    db.execute("COMMIT")
    db.close()
    return sent, body


def _peak_mb(*args: str) -> float:
    """The peak RSS of the installed command, measured by a process that is its only child."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(CTXSCOPE), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout) / 1024


def test_har_export_of_a_100_mb_session_stays_under_150_mb_over_its_baseline(tmp_path):
    path = tmp_path / "c.db"
    sent, last = _session(path)
    assert sent > 95e6
    lone, big = tmp_path / "lone.har", tmp_path / "big.har"
    baseline = _peak_mb("export", "lone", "--db", str(path), "-o", str(lone))
    peak = _peak_mb("export", "big", "--db", str(path), "-o", str(big))
    print(f"peak {peak:.0f} MB, baseline {baseline:.0f} MB, file {big.stat().st_size / 1e6:.0f} MB")
    assert peak - baseline < LIMIT_MB, f"peak {peak:.0f} MB, baseline {baseline:.0f} MB"
    assert big.stat().st_size > sent
    with big.open("rb") as f:
        entries = json.load(f)["log"]["entries"]
    assert len(entries) == CALLS
    assert entries[-1]["request"]["postData"]["text"].encode() == last
