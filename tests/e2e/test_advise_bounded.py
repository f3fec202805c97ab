"""``ctxscope advise`` reads at most one request body at a time, whatever the session's size: a
session whose prompts grow, with Claude Code's billing header (a new one each call) sent to a
third-party upstream that caches it as text, needs the billing what-if, which a stored shape
cannot express and which therefore reads the bodies. The INSTALLED command's peak memory is the
same for the session growing to 100K tokens and to 800K (the whole-session read it replaced grew
with the bodies: +28 MB from 100K to 400K on 40 calls), and its advice is the advice computed from
the bodies (the reference). Memory is asserted (the machine is shared); times are printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from advise_scale import build

from ctxscope.inspector.advisor.alternatives import advise
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.store import queries

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
CALLS = 40
GROWTH_MB = 15  # what the peak may differ by between the two sizes (noise: ~2 MB)


def _advise(tmp_path: Path, db: Path, session: str) -> tuple[float, float, dict]:
    """(CPU s, peak RSS MB, JSON) of the installed ``advise --json`` under ``/usr/bin/time`` (a small
    parent: this test process's own size is not the child's peak)."""
    report = tmp_path / "time.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = ["/usr/bin/time", "-o", str(report), "-f", "%U %S %M", str(CTXSCOPE), "advise", session]
    done = subprocess.run([*command, "--db", str(db), "--json"], capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    user, system, kb = report.read_text().split()[-3:]
    return float(user) + float(system), int(kb) / 1024, json.loads(done.stdout)


def _reference(db: Path, session: str) -> dict:
    s = load_session(queries.open_db(db), session)
    assert s is not None
    found = advise(s)
    assert found is not None
    return found.as_dict()


def test_advise_memory_does_not_grow_with_the_prompts(tmp_path):
    peaks = {}
    for tokens in (100_000, 800_000):
        db = tmp_path / f"s{tokens}.db"
        session = build(db, CALLS, tokens, billing=True)
        cpu, peak, out = _advise(tmp_path, db, session)
        print(f"{tokens:,}-token prompts, {CALLS} calls: advise {cpu:.2f} s CPU, {peak:.0f} MB peak")
        assert out["top"]["cause"] == "billing_header", out["advices"]
        assert out == json.loads(json.dumps(_reference(db, session)))
        peaks[tokens] = peak
    assert peaks[800_000] - peaks[100_000] < GROWTH_MB, peaks
