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


def _run(tmp_path: Path, *args: str) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of the installed command, as ``/usr/bin/time`` (a small
    parent: a child of this big test process would report this process's RSS as its own peak) saw
    it. Bytecode is written, as an installed package has it."""
    report = tmp_path / "time.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = ["/usr/bin/time", "-o", str(report), "-f", "%e %U %S %M", str(CTXSCOPE), *args]
    done = subprocess.run(command, capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    wall, user, system, kb = report.read_text().split()[-4:]
    return float(wall), float(user) + float(system), int(kb) / 1024, done.stdout.decode()


def test_advise_of_a_thousand_calls_reads_the_stored_shapes(tmp_path):
    db = tmp_path / "c.db"
    session = build(db, CALLS)
    _, _, light, _ = _run(tmp_path, "sessions", "--db", str(db), "--json")
    runs = [_run(tmp_path, "advise", session, "--db", str(db), "--json") for _ in range(2)]
    for wall, cpu, rss, _ in runs:
        print(f"advise of {CALLS} calls: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak ({light:.0f} MB light)")
    advice = json.loads(runs[-1][3])
    assert advice["calls"] == CALLS
    assert [a["cause"] for a in advice["advices"]][:1] == ["changing_span"]
    assert advice["top"]["pointer"] == "/system/0"
    cpu = min(r[1] for r in runs)  # a busy machine only ever adds CPU time
    assert cpu < 2.0, f"advise took {cpu:.2f} s of CPU"
    rss = max(r[2] for r in runs)
    assert rss - light < 200, f"advise peaked at {rss:.0f} MB, a light command at {light:.0f} MB"

    with running_serve(tmp_path) as (_, base):
        for view in ("findings", "advice"):
            began = time.monotonic()
            r = httpx2.get(f"{base}/_ctxscope/api/{view}", params={"s": session}, timeout=600)
            print(f"daemon {view} of {CALLS} calls: {time.monotonic() - began:.2f} s, {len(r.content) / 1024:.0f} KB")
            assert r.status_code == 200, r.text
            if view == "advice":
                assert r.json()["advice"]["advices"] == advice["advices"]
