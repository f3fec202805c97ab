"""``ctxscope advise`` of a 1,000-call session (a timestamp in the system prompt, the tools
reordered half-way, 6-minute gaps; stored through the writer's ingest with the daemon's analyzers)
reads the stored prompt shapes, not the bodies: the INSTALLED command under 2 s of CPU and
+200 MB over a light command's peak; the daemon's advice and findings for it answer the same.
CPU and memory are asserted (the machine is shared); wall times are printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from support.serve_process import running_serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from advise_scale import build

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
CALLS = 1000


def _run(*args: str) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of the installed command, from its own rusage."""
    began = time.monotonic()
    with subprocess.Popen([str(CTXSCOPE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        out = proc.stdout.read() if proc.stdout else b""
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.decode()
    return time.monotonic() - began, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.decode()


def test_advise_of_a_thousand_calls_reads_the_stored_shapes(tmp_path):
    db = tmp_path / "c.db"
    session = build(db, CALLS)
    _, _, light, _ = _run("sessions", "--db", str(db), "--json")
    wall, cpu, rss, out = _run("advise", session, "--db", str(db), "--json")
    print(f"advise of {CALLS} calls: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak ({light:.0f} MB light)")
    advice = json.loads(out)
    assert advice["calls"] == CALLS
    assert [a["cause"] for a in advice["advices"]][:1] == ["changing_span"]
    assert advice["top"]["pointer"] == "/system/0"
    assert cpu < 2.0, f"advise took {cpu:.2f} s of CPU"
    assert rss - light < 200, f"advise peaked at {rss:.0f} MB, a light command at {light:.0f} MB"

    with running_serve(tmp_path) as (_, base):
        for view in ("findings", "advice"):
            began = time.monotonic()
            r = httpx2.get(f"{base}/_ctxscope/api/{view}", params={"s": session}, timeout=600)
            print(f"daemon {view} of {CALLS} calls: {time.monotonic() - began:.2f} s, {len(r.content) / 1024:.0f} KB")
            assert r.status_code == 200, r.text
            if view == "advice":
                assert r.json()["advice"]["advices"] == advice["advices"]
