"""An imported file chooses no host for a key, and costs bounded memory: the INSTALLED `ctxscope
import`, `curl` and the replay's request builder fed hostile HARs and bundles the way the probe
made them (a host that merely contains "anthropic", an upstream that is a recording listener, a
32 KB zstd bomb, JSON nested 200,000 deep, ids of 1 character and of 1 MB)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxscope.inspector.share.bundle import zstd
from ctxscope.inspector.share.replay import build_request
from ctxscope.inspector.store.queries import get_call, list_calls, open_db

from support.key_traps import Trap
from support.serve_process import CTXSCOPE

KEY = "sk-ant-api03-IMPORTKEY-" + "0123456789abcdef" * 3
MESSAGES = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def ctxscope(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTXSCOPE_HOME": str(home), "ANTHROPIC_API_KEY": KEY}
    done = subprocess.run([str(CTXSCOPE), *args], env=env, capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, done.stderr
    return done


def har_file(path: Path, url: str, body: object, headers: list[dict] | None = None) -> Path:
    entry = {
        "startedDateTime": "2026-01-02T03:04:05.000Z",
        "time": 10,
        "timings": {"wait": 5},
        "request": {
            "method": "POST",
            "url": url,
            "headers": headers or [{"name": "x-api-key", "value": KEY}],
            "postData": {"mimeType": "application/json", "text": json.dumps(body)},
        },
        "response": {"status": 200, "headers": [], "content": {"text": "{}"}},
    }
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    return path


def bundle_file(path: Path, *exchanges: dict) -> Path:
    lines = [json.dumps({"format": "ctxscope-bundle", "version": 1})]
    lines += [json.dumps({"exchange": ex, "capture_epoch": 0, "analysis": {}}) for ex in exchanges]
    path.write_bytes(zstd.compress(("\n".join(lines) + "\n").encode()))
    return path


def exchange(call_id: str = "0123456789abcdef012345", **over: object) -> dict:
    fields = {
        "id": call_id,
        "provider": "anthropic",
        "upstream": "https://api.anthropic.com",
        "method": "POST",
        "path": "/v1/messages",
        "request_headers": [["x-api-key", "[redacted]"]],
        "request_body": base64.b64encode(json.dumps(MESSAGES).encode()).decode(),
        "started_at": 1.0e9,
        "ended_at": 1.0e9 + 1,
        "status": 200,
    }
    return {**fields, **over}


def imported(db: Path) -> dict:
    conn = open_db(db)
    try:
        [row] = list_calls(conn, limit=None)
        return row
    finally:
        conn.conn.close()


@pytest.mark.slow
def test_a_foreign_har_is_routed_by_its_path_and_body_never_by_its_host(tmp_path):
    db, home = tmp_path / "c.db", tmp_path / "home"
    ctxscope(
        "import",
        str(har_file(tmp_path / "evil.har", "https://evilanthropic.com/v1/messages", MESSAGES)),
        "--db",
        str(db),
        home=home,
    )
    row = imported(db)
    conn = open_db(db)
    try:
        assert get_call(conn, row["id"])["upstream"] == "https://evilanthropic.com"  # kept, as what the file said
    finally:
        conn.conn.close()
    assert row["provider"] == "anthropic"
    done = ctxscope("curl", row["id"], "--db", str(db), home=home)
    assert "http://127.0.0.1:8787/s/import%3Aevil/anthropic/v1/messages" in done.stdout
    assert '"x-api-key: $ANTHROPIC_API_KEY"' in done.stdout and "evilanthropic" not in done.stdout
    assert "was imported" in done.stderr


@pytest.mark.slow
def test_an_unknown_shape_is_unknown_and_never_gets_a_key(tmp_path):
    db, home = tmp_path / "c.db", tmp_path / "home"
    har = har_file(tmp_path / "files.har", "https://api.anthropic.com/v1/files", {"purpose": "upload"})
    ctxscope("import", str(har), "--db", str(db), home=home)
    row = imported(db)
    assert row["provider"] == "unknown"
    done = ctxscope("curl", row["id"], "--db", str(db), home=home, check=False)
    assert done.returncode == 1 and "speaks no API ctxscope knows" in done.stderr and "API_KEY" not in done.stdout
    chosen = ctxscope("curl", row["id"], "--db", str(db), "--via", "http://127.0.0.1:9", home=home)
    assert "API_KEY" not in chosen.stdout and "# left out, redacted when captured: x-api-key" in chosen.stdout


@pytest.mark.slow
def test_a_bundle_naming_a_listener_as_upstream_sends_it_no_key(tmp_path):
    db, home = tmp_path / "c.db", tmp_path / "home"
    with Trap("127.0.0.2") as trap:
        bundle = bundle_file(
            tmp_path / "b.ctxscope", exchange(provider=f"u/{trap.host}", upstream=f"http://{trap.netloc}")
        )
        ctxscope("import", str(bundle), "--db", str(db), home=home)
        row = imported(db)
        done = ctxscope("curl", row["id"], "--db", str(db), home=home)
        assert "http://127.0.0.1:8787/anthropic/v1/messages" in done.stdout and trap.netloc not in done.stdout
        conn = open_db(db)
        try:
            req = build_request(conn, row["id"], "http://127.0.0.1:9", key=KEY)
        finally:
            conn.conn.close()
        assert req.url == "http://127.0.0.1:9/anthropic/v1/messages"
    assert trap.connections == 0 and trap.keys_seen(KEY) == []


def _peak_rss_mb(*args: str, home: Path) -> tuple[subprocess.CompletedProcess, float]:
    """The command's peak RSS (its own, in a fresh parent that waits for nothing else)."""
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(done.stderr)\n"
    )
    env = {**os.environ, "CTXSCOPE_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", probe, str(CTXSCOPE), *args], env=env, capture_output=True, text=True, timeout=300
    )
    code, kb = out.stdout.split()
    return subprocess.CompletedProcess(args, int(code), "", out.stderr), int(kb) / 1024


@pytest.mark.slow
def test_a_zstd_bomb_stops_at_the_cap_with_a_one_line_error(tmp_path):
    home = tmp_path / "home"
    compressor = zstd.ZstdCompressor(level=19)
    parts = [compressor.compress(b'{"format":"ctxscope-bundle","version":1}\n{"exchange":"')]
    chunk = b"A" * (16 << 20)
    parts += [compressor.compress(chunk) for _ in range(64)]  # one line of 1 GiB
    bomb = tmp_path / "bomb.ctxscope"
    bomb.write_bytes(b"".join(parts) + compressor.flush())
    assert bomb.stat().st_size < 40_000
    small = bundle_file(tmp_path / "small.ctxscope", exchange())
    base, base_mb = _peak_rss_mb("import", str(small), "--db", str(tmp_path / "a.db"), home=home)
    assert base.returncode == 0, base.stderr
    t0 = time.monotonic()
    done, bomb_mb = _peak_rss_mb("import", str(bomb), "--db", str(tmp_path / "b.db"), home=home)
    took = time.monotonic() - t0
    print(f"bomb {bomb.stat().st_size} bytes: peak RSS {bomb_mb:.0f} MB against {base_mb:.0f} MB, {took:.1f} s")
    assert done.returncode == 1 and "over 64 MiB" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert bomb_mb - base_mb < 300
    assert not (tmp_path / "b.db").exists()


@pytest.mark.slow
def test_many_lines_stop_at_the_total_cap(tmp_path):
    line = json.dumps({"exchange": exchange(request_body="A" * (60 << 20))}).encode() + b"\n"
    compressor = zstd.ZstdCompressor(level=3)
    data = compressor.compress(b'{"format":"ctxscope-bundle","version":1}\n')
    data += b"".join(compressor.compress(line) for _ in range(8)) + compressor.flush()
    bomb = tmp_path / "lines.ctxscope"
    bomb.write_bytes(data)
    done = ctxscope("import", str(bomb), "--db", str(tmp_path / "c.db"), home=tmp_path / "home", check=False)
    assert done.returncode == 1 and "decodes to more than 256 MiB" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("depth", [200_000, 500])
def test_deep_nesting_is_a_one_line_error(tmp_path, depth):
    har = tmp_path / "deep.har"
    har.write_bytes(b'{"log":{"entries":' + b"[" * depth + b"]" * depth + b"}}")
    done = ctxscope("import", str(har), "--db", str(tmp_path / "c.db"), home=tmp_path / "home", check=False)
    assert done.returncode == 1 and "nested more than 64 levels deep" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("call_id", ["a", "x" * (1 << 20), "../../etc/passwd"], ids=["1-char", "1-MB", "path"])
def test_ids_outside_8_to_128_safe_characters_are_refused(tmp_path, call_id):
    bundle = bundle_file(tmp_path / "ids.ctxscope", exchange(call_id))
    done = ctxscope("import", str(bundle), "--db", str(tmp_path / "c.db"), home=tmp_path / "home", check=False)
    assert done.returncode == 1 and "is not 8 to 128 letters" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr) < 400 and not (tmp_path / "c.db").exists()
