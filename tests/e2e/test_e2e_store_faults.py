"""The store failing under a running `ctxscope serve`: forwarding goes on, no call is lost, and
`ctxscope db status` tells the truth from the first failure. Also a planted spool next to the
database: it runs nothing and capture goes on."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.main import cli

from support.environment import require
from support.factories import make_exchange, plant_pickle_spool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """`ctxscope serve` in a child process, as a user runs it."""

    def __init__(self, tmp_path: Path, db: Path, *options: str):
        self.db = db
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"serve-{self.port}.log"
        env = dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home"))
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ctxscope.main", "serve", "--port", str(self.port), "--db", str(db), *options],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx2.get(self.url + "/_ctxscope/api/status?store=0", timeout=1)
                return
            except httpx2.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.proc.kill()
                    raise AssertionError("serve did not start: " + self.output()) from None

    def output(self) -> str:
        return self.log.read_text()

    def chat(self, n: int, pad: int = 0) -> None:
        with httpx2.Client(timeout=30) as c:
            for i in range(n):
                text = f"m{i} " + os.urandom(pad).hex()
                r = c.post(
                    self.url + "/u/sim/v1/chat/completions",
                    json={"model": "gpt-sim", "messages": [{"role": "user", "content": text}]},
                )
                assert r.status_code == 200, r.text

    def writer(self) -> dict:
        return httpx2.get(self.url + "/_ctxscope/api/status", timeout=10).json()["writer"]

    def stop(self) -> str:
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        return self.output()


def db_status(db: Path) -> dict:
    result = CliRunner().invoke(cli, ["db", "status", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def stored_ids(db: Path) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM calls")]
    except sqlite3.DatabaseError:
        return []
    finally:
        conn.close()


def wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_serve_with_planted_spools_runs_nothing_captures_and_reports_them(tmp_path):
    db = tmp_path / "c.db"
    marker = tmp_path / "pwned"
    plant_pickle_spool(spools.spool_path(db, 31337), marker)
    garbage = spools.spool_path(db, 31338)
    garbage.write_bytes(os.urandom(3000))
    os.chmod(garbage, 0o600)
    serve = Serve(tmp_path, db)
    try:
        serve.chat(2)
        wait_for(lambda: len(stored_ids(db)) >= 2, what="the calls to be stored")
        status = db_status(db)
        assert len(status["spool"]["quarantined"]) == 2
        assert status["capture"]["state"] == "storing"
        assert status["capture"]["writers"][0]["spools_quarantined"] == 2
        text = CliRunner().invoke(cli, ["db", "status", "--db", str(db)]).output
        assert "quarantined" in text and "storing" in text
    finally:
        out = serve.stop()
    assert not marker.exists()
    assert "quarantined" in out and serve.proc.returncode == 0


@pytest.mark.parametrize("how", ["corrupt database file", "folder cannot be created", "read-only filesystem"])
def test_serve_starts_forwards_and_says_so_when_the_store_cannot_be_opened(tmp_path, how):
    mounted = None
    if how == "corrupt database file":
        db = tmp_path / "c.db"
        db.write_bytes(b"not a database at all " * 500)
        repair = db.unlink
    elif how == "folder cannot be created":
        blocker = tmp_path / "blocker"
        blocker.write_text("a file where the database's folder should be")
        db = blocker / "c.db"
        repair = lambda: (blocker.unlink(), blocker.mkdir())  # noqa: E731
    else:
        mounted = tmp_path / "ro"
        require(_mount_tmpfs(mounted, "8m", "ro"), "mounting a tmpfs is not permitted here")
        db = mounted / "c.db"
        repair = lambda: subprocess.run(["mount", "-o", "remount,rw", str(mounted)], check=True)  # noqa: E731
    try:
        _serve_through_an_unopenable_store(tmp_path, db, repair, readable_status=how == "corrupt database file")
    finally:
        if mounted is not None:
            subprocess.run(["umount", "-l", str(mounted)], capture_output=True)


def _serve_through_an_unopenable_store(tmp_path, db, repair, readable_status: bool) -> None:
    serve = Serve(tmp_path, db)
    try:
        serve.chat(5)  # forwarding works regardless
        w = serve.writer()
        assert w["store_down_since"] and w["store_failures"] >= 1 and w["failures"] >= 1 and w["queued"] >= 5
        if readable_status:  # db status can read the live counters next to the database
            wait_for(lambda: db_status(db)["capture"].get("waiting", 0) >= 5, what="db status to count the calls")
            capture = db_status(db)["capture"]
            assert capture["state"] == "store failing" and capture["failures"] >= 1
            assert "not a database" in capture["last_error"]
            text = CliRunner().invoke(cli, ["db", "status", "--db", str(db)]).output
            assert "STORE FAILING since" in text and "calls waiting" in text
        assert "CAPTURE IS NOT STORING" in serve.output()
        repair()
        wait_for(lambda: len(stored_ids(db)) >= 5, what="the waiting calls to be stored")
        wait_for(lambda: serve.writer()["store_down_since"] is None, what="the status to clear")
    finally:
        serve.stop()
    ids = stored_ids(db)
    assert len(ids) == len(set(ids)) == 5


def test_a_burst_past_max_spool_bytes_is_answered_dropped_and_counted(tmp_path):
    """The store cannot be opened, so every call waits in the spool: the spool stops at its limit
    (one call over at most), forwarding goes on, and the calls past it are counted where users look."""
    db = tmp_path / "c.db"
    db.write_bytes(b"not a database at all " * 500)  # holds the writer back: nothing leaves the spool
    limit, pad = 64 * 1024, 2000
    serve = Serve(tmp_path, db, "--limit", f"max_spool_bytes={limit}")
    biggest = 0
    try:
        for _ in range(12):
            serve.chat(10, pad=pad)  # all answered 200 (chat asserts it)
            biggest = max([biggest] + [p.stat().st_size for p in spools.spool_files(db)])

        def all_counted() -> bool:  # the status file is published every 0.5 s: wait for one after the burst
            c = db_status(db)["capture"]
            return bool(c.get("dropped_spool_full")) and c.get("waiting", 0) + c["dropped_spool_full"] == 120

        wait_for(all_counted, what="db status to count every call, the dropped ones too")
        wait_for(lambda: serve.writer()["dropped_spool_full"] > 0, what="the UI's status to count them")
        status = db_status(db)
        capture, spool = status["capture"], status["spool"]
        biggest = max([biggest] + [p.stat().st_size for p in spools.spool_files(db)])
        assert capture["dropped"] >= capture["dropped_spool_full"] > 0
        assert capture["waiting"] + capture["dropped_spool_full"] == 120
        one_call = 2 * pad + 16 * 1024  # a call's request and response, headers and framing, generously
        assert 0 < spool["bytes"] <= biggest <= limit + one_call
        text = CliRunner().invoke(cli, ["db", "status", "--db", str(db)]).output
        assert "spool was full" in text
        assert serve.writer()["failures"] >= capture["dropped_spool_full"]
    finally:
        out = serve.stop()
    assert "dropped: the spool reached max_spool_bytes" in out


def _mount_tmpfs(path: Path, size: str, *options: str) -> bool:
    path.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", "mode=0700", *options]), "tmpfs", str(path)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _fill(disk: Path) -> Path:
    """A file that takes every free byte of the disk."""
    filler = disk / f"filler-{uuid.uuid4().hex}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_under_serve_loses_no_call_and_db_status_says_so(tmp_path):
    """A real full disk: the database and its spool on a small tmpfs, filled to the last byte."""
    disk = tmp_path / "disk"
    require(
        _mount_tmpfs(disk, "24m"),
        "mounting a tmpfs is not permitted here; test_inspector_writer covers "
        "SQLITE_FULL through max_page_count, and the full spool through a failing write",
    )
    db = disk / "c.db"
    serve = None
    try:
        serve = Serve(tmp_path, db)
        serve.chat(1)
        wait_for(lambda: len(stored_ids(db)) == 1, what="a first call to be stored")
        filler = _fill(disk)
        serve.chat(60, pad=10_000)  # 60 calls of 20 KB each: far more than the WAL holds already
        wait_for(lambda: db_status(db)["capture"]["state"] == "store failing", what="db status to report it")
        wait_for(lambda: db_status(db)["capture"].get("waiting", 0) >= 60, what="the 60 calls to be counted waiting")
        capture = db_status(db)["capture"]
        assert capture["failures"] >= 1 and "full" in (capture["last_error"] or "")
        assert len(stored_ids(db)) == 1  # none stored while the disk is full
        w = serve.writer()
        assert w["store_down_since"] and w["failures"] >= 1 and w["queued"] >= 60
        filler.unlink()  # space returns
        wait_for(lambda: len(stored_ids(db)) == 61, what="all 60 calls to be stored")
        wait_for(lambda: db_status(db)["capture"]["state"] == "storing", what="the status to clear")
    finally:
        if serve is not None:
            out = serve.stop()
        ids = stored_ids(db) if db.exists() else []
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert len(ids) == len(set(ids)) == 61  # every call once
    assert serve.proc.returncode == 0, out
    assert "database or disk is full" in out  # the store's
    assert "the disk holding its spool is full" in out  # the spool's: its calls waited in memory


def full_disk_analyzers():
    """The daemon's analyzers, in a writer child whose database connections may not grow the file
    while a flag file exists: SQLITE_FULL, from SQLite's max_page_count."""
    from ctxscope.inspector.pipeline.analyze import writer_analyzers
    from ctxscope.inspector.store import db as store

    real = store.open_handle  # the writer's connections
    flag = Path(os.environ["CTXSCOPE_TEST_FULL_FLAG"])

    def open_handle(path, **kw):
        db = real(path, **kw)
        if flag.exists():
            db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
        return db

    store.open_handle = open_handle
    return writer_analyzers()


def test_sqlite_full_in_the_writer_child_keeps_every_call_in_the_spool_until_stored(tmp_path, monkeypatch):

    from ctxscope.inspector.reading.db_status import db_status as read_status
    from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess

    flag = tmp_path / "full"
    monkeypatch.setenv("CTXSCOPE_TEST_FULL_FLAG", str(flag))
    db = tmp_path / "c.db"
    from ctxscope.inspector.store import db as store

    fresh = store.connect(db)
    fresh.execute("VACUUM")  # no free page left by the migrations: the first call must not fit either
    fresh.close()
    flag.touch()
    w = WriterProcess(db, analyzers_factory="test_e2e_store_faults:full_disk_analyzers", retry_interval=0.2)
    w.start()
    try:
        exs = [make_exchange(i, request_body=os.urandom(10_000).hex().encode()) for i in range(60)]
        for ex in exs:
            w.submit(ex)
        wait_for(lambda: w.stats().store_failures >= 2, what="the store to fail")
        wait_for(lambda: db_status(db)["capture"].get("waiting") == 60, what="db status to count them")
        st = w.stats()
        assert st.written == 0 and st.queued == 60 and st.dropped == 0 and "full" in st.last_error
        assert read_status(db)["spool"]["bytes"] > 60 * 20_000  # the calls wait on disk, not in memory
        assert db_status(db)["capture"]["state"] == "store failing"
        flag.unlink()  # space returns
        wait_for(lambda: w.stats().written == 60, what="all 60 to be stored")
    finally:
        assert w.stop()
    ids = stored_ids(db)
    assert sorted(ids) == sorted(e.id for e in exs)
    assert read_status(db)["writer"]["store_unavailable"] >= 1


def test_serve_starts_on_a_full_disk_and_stores_once_space_returns(tmp_path):
    disk = tmp_path / "disk"
    require(_mount_tmpfs(disk, "8m"), "mounting a tmpfs is not permitted here")
    db = disk / "c.db"
    serve = None
    try:
        filler = _fill(disk)  # full before ctxscope ever ran: no database, no spool, no status file
        serve = Serve(tmp_path, db)
        serve.chat(3)
        w = serve.writer()
        assert w["store_down_since"] and w["failures"] >= 1 and w["queued"] >= 3
        # No room for its status file next to the database: db status finds it in the runtime folder.
        wait_for(lambda: db_status(db)["capture"].get("waiting", 0) >= 3, what="db status to count the calls")
        capture = db_status(db)["capture"]
        assert capture["state"] == "store failing" and "full" in capture["last_error"]
        filler.unlink()
        wait_for(lambda: len(stored_ids(db)) == 3, what="the 3 calls to be stored")
    finally:
        if serve is not None:
            out = serve.stop()
        ids = stored_ids(db) if db.exists() else []
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert len(ids) == len(set(ids)) == 3
    assert serve.proc.returncode == 0 and "CAPTURE IS NOT STORING" in out


def test_stopping_while_the_store_fails_says_the_calls_stay_in_the_spool_and_the_next_serve_stores_them(tmp_path):
    db = tmp_path / "c.db"
    db.write_bytes(b"not a database at all " * 500)
    serve = Serve(tmp_path, db)
    try:
        serve.chat(3)
        wait_for(lambda: serve.writer()["queued"] >= 3, what="the calls to wait")
    finally:
        out = serve.stop()
    assert "the store is failing, so 3 captured calls stay in the spool" in out, out
    assert "storing 3 captured calls" not in out
    db.unlink()  # repaired: the next serve on this database stores what the spool kept
    again = Serve(tmp_path, db)
    try:
        wait_for(lambda: len(stored_ids(db)) >= 3, what="the spooled calls to be stored")
    finally:
        again.stop()
    ids = stored_ids(db)
    assert len(ids) == len(set(ids)) == 3
