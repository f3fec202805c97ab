"""The installed `ctxscope import` reads a HAR an entry at a time (``share/har_stream.py``): a
session exported and imported back has byte-identical bodies, a HAR in any valid layout imports,
a broken one (truncated, garbage after it, an entry over the limit) is a one-line error that
names where and writes nothing, and a ~100 MB HAR imports within +150 MB of a one-entry one."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, list_calls, open_db

from support.big_har import entry, write_big_har
from support.factories import anthropic_request, anthropic_response, capture, make_exchange

CTXSCOPE = Path(sys.executable).parent / "ctxscope"
LIMIT_MB = 150


def run(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTXSCOPE_HOME": str(home)}
    done = subprocess.run([str(CTXSCOPE), *args], env=env, capture_output=True, text=True, timeout=600)
    assert not check or done.returncode == 0, done.stderr
    return done


def refused(path: Path, tmp_path: Path, *more: str) -> str:
    """The one-line error importing ``path`` gives; the database is not even created."""
    db = tmp_path / "refused.db"
    done = run("import", str(path), "--db", str(db), *more, home=tmp_path / "home", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not db.exists()
    return done.stderr


def session() -> list:
    """Calls whose start order is not their store order (two ran at once), with a gzip answer, a
    body that is not UTF-8, a 3 MB one-line prompt beyond ASCII and an empty cancelled call."""
    ct = ("content-type", "application/json")
    big = json.dumps(anthropic_request([{"role": "user", "content": "é😀 \u2028" * 300_000}]), ensure_ascii=False)
    return [
        make_exchange(1, session_label="trip", started_at=1.75e9 + 10),
        make_exchange(2, session_label="trip", started_at=1.75e9 + 5),  # stored after, started before
        make_exchange(
            3,
            session_label="trip",
            response_body=gzip.compress(json.dumps(anthropic_response("squeezed ✓")).encode(), mtime=0),
            response_headers=(ct, ("content-encoding", "gzip")),
        ),
        make_exchange(session_label="trip", request_body=b'{"x": "\xff\xfe"}' + bytes(range(256)) * 40),
        make_exchange(session_label="trip", request_body=big.encode()),
        make_exchange(session_label="trip", request_body=b"", response_body=b"", status=None, outcome="cancelled"),
    ]


@pytest.mark.parametrize("fmt", ["har", "bundle"])
def test_a_session_exported_and_imported_back_has_byte_identical_bodies(tmp_path, fmt):
    exchanges = session()
    home, source = tmp_path / "home", tmp_path / "source.db"
    capture(source, exchanges).close()
    out, fresh = tmp_path / f"trip.{fmt}", tmp_path / "fresh.db"
    run("export", "trip", "--db", str(source), "--format", fmt, "-o", str(out), home=home)
    report = json.loads(run("import", str(out), "--db", str(fresh), "--json", home=home).stdout)
    assert (report["calls"], report["stored"], report["format"]) == (len(exchanges), len(exchanges), fmt)
    assert report["checked"] == len(exchanges)  # (the source was stored unanalysed: its differences are not the point)
    db = open_db(fresh)
    try:
        for ex in exchanges:
            assert get_request_raw(db, ex.id) == ex.request_body
            assert get_response_raw(db, ex.id) == ex.response_body
        stored = [c["id"] for c in list_calls(db, limit=None)]
    finally:
        db.close()
    assert sorted(stored) == sorted(ex.id for ex in exchanges)
    again = json.loads(run("import", str(out), "--db", str(fresh), "--json", home=home).stdout)
    assert (again["stored"], again["skipped"]) == (0, len(exchanges))
    if fmt == "har":  # exported again from the import: the same bodies, entry for entry
        back = tmp_path / "back.har"
        run("export", "trip", "--db", str(fresh), "-o", str(back), home=home)
        first = {e["_ctxscope"]["id"]: e for e in json.loads(out.read_bytes())["log"]["entries"]}
        second = {e["_ctxscope"]["id"]: e for e in json.loads(back.read_bytes())["log"]["entries"]}
        assert first.keys() == second.keys()
        for call_id, e in first.items():
            assert e["request"].get("postData") == second[call_id]["request"].get("postData")
            assert e["response"]["content"] == second[call_id]["response"]["content"]


def test_entries_before_creator_with_any_whitespace_and_escapes_import(tmp_path):
    one, two = entry(0, 2_000), entry(1, 2_000)
    two["request"]["postData"]["text"] = json.dumps(anthropic_request([{"role": "user", "content": 'é "q" \\ \u2028'}]))
    body = json.dumps([one, two], indent=3, ensure_ascii=True)  # every non-ASCII character an escape
    har = tmp_path / "odd.har"
    har.write_bytes(
        b'\xef\xbb\xbf \n{ "log" :\t{\r\n "entries" : '
        + body.encode()
        + b' ,\n"creator":{"name":"other \\"tool\\"","version":"1"},"pages":[], "version" : "1.2"} ,"x": 1.5e3 }\n\n'
    )
    done = run("import", str(har), "--db", str(tmp_path / "c.db"), "--json", home=tmp_path / "home")
    assert json.loads(done.stdout)["stored"] == 2
    db = open_db(tmp_path / "c.db")
    try:
        texts = sorted(get_request_raw(db, c["id"]) for c in list_calls(db, limit=None))
    finally:
        db.close()
    assert sorted(e["request"]["postData"]["text"].encode() for e in (one, two)) == texts


def test_a_truncated_file_garbage_after_it_and_bad_json_are_refused_with_the_byte_offset(tmp_path):
    good = json.dumps({"log": {"version": "1.2", "entries": [entry(0, 5_000), entry(1, 5_000)]}}).encode()
    cut = tmp_path / "cut.har"
    cut.write_bytes(good[:-100])
    assert f"the file ends at byte {len(good) - 100}, inside HAR entry 1 (truncated?)" in refused(cut, tmp_path)
    tail = tmp_path / "tail.har"
    tail.write_bytes(good + b'\n{"log": {}}')
    assert f"the file is not JSON at byte {len(good) + 1}: something follows the document" in refused(tail, tmp_path)
    broken = tmp_path / "broken.har"
    at = good.index(b'"response"')
    broken.write_bytes(good[:at] + b"," + good[at:])
    assert f"the file is not JSON at byte {at}: Expecting property name" in refused(broken, tmp_path)


def _peak_mb(*args: str, code: int = 0) -> tuple[float, str]:
    """The installed command's peak RSS, read by wait4 in a process that has no other child."""
    probe = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "err = child.stderr.read()\n"
        "_, status, usage = os.wait4(child.pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n"
        "sys.stderr.write(err.decode())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(CTXSCOPE), *args], capture_output=True, text=True)
    got, kb = done.stdout.split()
    assert int(got) == code, done.stderr
    return int(kb) / 1024, done.stderr


def test_an_entry_over_the_limit_is_refused_holding_about_the_limit(tmp_path):
    lone, har = tmp_path / "lone.har", tmp_path / "one.har"
    write_big_har(lone, 1, 1_000)
    write_big_har(har, 1, 64 << 20)  # one 64 MB entry; --max-size 16MiB allows a 4 MiB one
    baseline, _ = _peak_mb("import", str(lone), "--db", str(tmp_path / "lone.db"))
    peak, message = _peak_mb("import", str(har), "--db", str(tmp_path / "c.db"), "--max-size", "16MiB", code=1)
    print(f"refused a 64 MB entry: peak {peak:.0f} MB, baseline {baseline:.0f} MB")
    assert message.strip().endswith("HAR entry 0 is over 4 MiB (--max-size raises the limit)"), message
    assert len(message.strip().splitlines()) == 1 and not (tmp_path / "c.db").exists()
    assert peak - baseline < 40


@pytest.mark.slow
def test_a_100_mb_har_imports_within_150_mb_of_a_one_entry_one(tmp_path):
    """The old import held the parsed file: +565 MB for 201 MB, about +280 MB for this one."""
    big, lone = tmp_path / "big.har", tmp_path / "lone.har"
    size = write_big_har(big, 1_000, 100_000)
    write_big_har(lone, 1, 100_000)
    assert size > 100e6
    baseline, _ = _peak_mb("import", str(lone), "--db", str(tmp_path / "lone.db"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, progress = _peak_mb("import", str(big), "--db", str(tmp_path / "big.db"), "--progress")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"{size / 1e6:.0f} MB HAR: peak {peak:.0f} MB, baseline {baseline:.0f} MB, {cpu:.0f} s CPU")
    assert peak - baseline < LIMIT_MB, f"peak {peak:.0f} MB, baseline {baseline:.0f} MB"
    assert "checking: 1000 entries, 96 MiB read" in progress and "importing: 1000/1000" in progress
    db = open_db(tmp_path / "big.db")
    try:
        assert len(list_calls(db, limit=None)) == 1_000
    finally:
        db.close()
