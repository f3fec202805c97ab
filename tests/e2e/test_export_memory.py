"""The installed `ctxscope export --format har` of a ~100 MB agent session (100 calls, each the
previous prompt plus ~20 KB, UTF-8 beyond ASCII as a JavaScript client sends it) peaks under
+150 MB over the same command exporting a one-call session (``share/har_writer.py``; it was
+1.2 GB), and the file it writes is the whole session, valid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from support.export_sessions import CALLS, growing_session
from support.serve_process import running_serve

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
LIMIT_MB = 150
PAUSE, SLOW_LIMIT_MB = 6.0, 40  # unread for that long, the daemon must not have the file queued
PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_mb(*args: str) -> float:
    """The peak RSS of the installed command, measured by a process that is its only child."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(CTXSCOPE), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout) / 1024


def test_har_export_of_a_100_mb_session_stays_under_150_mb_over_its_baseline(tmp_path):
    path = tmp_path / "c.db"
    sent, last = growing_session(path)
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


def _status_mb(pid: int, field: str) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(field + ":")[1].split()[0]) / 1024


def _held_while(pid: int, seconds: float) -> float:
    """The most the process held while we read nothing for ``seconds``."""
    most, end = 0.0, time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, _status_mb(pid, "VmRSS"))
        time.sleep(0.2)
    return most


def test_the_daemons_har_download_streams_in_bounded_memory_even_to_a_slow_client(tmp_path):
    sent, last = growing_session(tmp_path / "c.db")
    with running_serve(tmp_path) as (proc, base):
        assert httpx2.get(f"{base}/_ctxscope/api/sessions", timeout=60).status_code == 200  # the store's side loaded
        resting = _status_mb(proc.pid, "VmRSS")
        got = bytearray()
        with httpx2.stream("GET", f"{base}/_ctxscope/api/export.har", params={"s": "big"}, timeout=120) as resp:
            assert resp.status_code == 200 and "attachment" in resp.headers["content-disposition"]
            for piece in resp.iter_bytes():
                if len(got) < 4 << 20 <= len(got) + len(piece):  # a slow reader: the daemon waits for it
                    held_while_slow = _held_while(proc.pid, PAUSE) - resting
                got += piece
        peak = _status_mb(proc.pid, "VmHWM") - resting
        print(f"resting {resting:.0f} MB, +{held_while_slow:.0f} MB while slow, peak +{peak:.0f} MB")
        assert held_while_slow < SLOW_LIMIT_MB and peak < LIMIT_MB
        cli_file = tmp_path / "cli.har"
        subprocess.run(
            [str(CTXSCOPE), "export", "big", "--db", str(tmp_path / "c.db"), "--daemon", base, "-o", str(cli_file)],
            check=True,
            capture_output=True,
        )
        assert bytes(got) == cli_file.read_bytes()  # the same file as the CLI's
        entries = json.loads(got)["log"]["entries"]
        assert len(entries) == CALLS and entries[-1]["request"]["postData"]["text"].encode() == last
        with httpx2.stream("GET", f"{base}/_ctxscope/api/export.har", params={"s": "big"}, timeout=60) as resp:
            next(resp.iter_bytes())  # and leaves
        assert httpx2.get(f"{base}/_ctxscope/api/export.har", params={"s": "nothing"}, timeout=60).status_code == 404
        again = httpx2.get(f"{base}/_ctxscope/api/export.har", params={"s": "lone"}, timeout=60)
        assert again.status_code == 200 and len(json.loads(again.content)["log"]["entries"]) == 1
        assert sent > 95e6
    assert "Traceback" not in (tmp_path / "serve.log").read_text()  # a client that left is one line
