"""``bench/scale.py --quick`` end to end, so the scale bench cannot rot: it builds its store through
the writer's ingest, reads it with the installed command, a real daemon and Chromium, runs the
sustained load, and judges the held-out targets. This test asserts that every measurement was
taken (no command failed, no endpoint failed, every page got ready), that no call was lost under
load, and that a second run with the same ``--store`` reuses the store instead of building it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


@pytest.mark.slow
def test_scale_bench_quick_run_measures_everything(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--quick", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=tmp_path,
    )
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    built = re.search(r"store: ([\d,]+) calls \(600 in 6 sessions, the longest 200; and (\d+) calls", out)
    assert built, out[:2000]
    assert int(built[1].replace(",", "")) == 600 + int(built[2]) and int(built[2]) > 10
    for absent in ("exited", "failed:", "not ready"):
        assert absent not in out, out
    cli_rows = re.findall(r"^  (calls|findings|advise|export) +\d+\.\d\d s +\d+ MB", out, re.M)
    assert len(cli_rows) == 12, out  # four commands for each of three sessions
    api_rows = re.findall(r"^  (?:sessions|session|findings|advice|call|diff) +/\S+ +\d+\.\d\d s +[\d,]+ B$", out, re.M)
    assert len(api_rows) == 18, out  # six endpoints for each of three sessions
    assert len(re.findall(r"JS heap", out)) == 5
    load = re.search(r"sustained load: 4 senders .*: ([\d,]+) calls sent, ([\d,]+) stored .*, 0 dropped", out)
    assert load and int(load[1].replace(",", "")) > 0 and load[1] == load[2], out[-1500:]
    verdicts = re.findall(r"^  (PASS|FAIL)  ", out, re.M)
    assert len(verdicts) == 7 and re.search(rf"^{verdicts.count('PASS')}/7 targets pass$", out, re.M)
    assert re.search(r"^  PASS  sustained load", out, re.M)

    db = next(store.glob("*.db"))
    before = db.stat().st_mtime_ns
    again = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(BENCH)!r}); import scale_build as b; from pathlib import Path;"
            f" b.stored_store(Path({str(store)!r}), b.Size(600, 6, 200, 60_000))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"reusing {db}: store: "), again.stdout
    assert db.stat().st_mtime_ns == before
