"""Captured prompts are the owner's alone: home 0700, database, its -wal/-shm, spools, salt 0600;
loose permissions left by an older version are tightened on start, with a warning."""

from __future__ import annotations

import logging
import os
import stat
import time

import httpx2
import pytest

from ctxscope.daemon import start_daemon
from ctxscope.settings import DaemonConfig


@pytest.fixture(autouse=True)
def usual_umask():
    """The usual umask, which alone would give folders 0755 and files 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _chat(url: str, n: int = 3) -> None:
    with httpx2.Client(timeout=30) as c:
        for i in range(n):
            r = c.post(
                url + "/u/sim/v1/chat/completions",
                json={"model": "gpt-sim", "messages": [{"role": "user", "content": f"m{i}"}]},
            )
            assert r.status_code == 200


def _wait_stored(writer, n: int) -> None:
    deadline = time.monotonic() + 30
    while writer.stats().written < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.stats().written >= n


@pytest.mark.slow
def test_a_fresh_home_database_and_spool_are_owner_only(loop_thread, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    db = tmp_path / "elsewhere" / "captures.db"
    daemon = loop_thread.call(start_daemon(DaemonConfig(host="127.0.0.1", port=0, db=db)))
    try:
        _chat(daemon.url)
        _wait_stored(daemon.writer, 3)
        home = tmp_path / "home"
        assert _mode(home) == 0o700 and _mode(home / "salt") == 0o600
        assert _mode(db.parent) == 0o700  # a folder ctxscope created for the database
        made = sorted(p.name for p in db.parent.iterdir())
        assert "captures.db-wal" in made and any(".spool-" in n for n in made) and any(".writer-" in n for n in made)
        assert {n: _mode(db.parent / n) for n in made} == dict.fromkeys(made, 384)
    finally:
        loop_thread.call(daemon.stop())


@pytest.mark.slow
def test_loose_permissions_are_tightened_on_start_with_a_warning(loop_thread, tmp_path, monkeypatch, caplog):
    home = tmp_path / "home"
    monkeypatch.setenv("CTXSCOPE_HOME", str(home))
    daemon = loop_thread.call(start_daemon(DaemonConfig(host="127.0.0.1", port=0, db=home / "captures.db")))
    _chat(daemon.url, 1)
    _wait_stored(daemon.writer, 1)
    loop_thread.call(daemon.stop())
    db = home / "captures.db"
    loose = {home: 0o755, db: 0o644, home / "salt": 0o644}  # what an older version left
    for path, mode in loose.items():
        os.chmod(path, mode)
    with caplog.at_level(logging.WARNING):
        daemon = loop_thread.call(start_daemon(DaemonConfig(host="127.0.0.1", port=0, db=db, writer="thread")))
        try:
            _chat(daemon.url, 1)
            assert _mode(db.with_name("captures.db-wal")) == 0o600
        finally:
            loop_thread.call(daemon.stop())
    assert {path: _mode(path) for path in loose} == {home: 0o700, db: 0o600, home / "salt": 0o600}
    for path, mode in loose.items():
        assert f"tightened permissions of {path} from {mode:04o}" in caplog.text


def test_tightening_never_changes_a_file_swapped_in_through_a_symlink(tmp_path, monkeypatch):
    """Between looking at a loose file and changing its mode, the file is replaced by a symlink to
    another file of this user: that other file's mode must stay as it is."""
    from ctxscope.inspector.base import owner_only

    loose = tmp_path / "captures.db"
    loose.write_bytes(b"x")
    os.chmod(loose, 0o666)
    victim = tmp_path / "victim"
    victim.write_bytes(b"v")
    os.chmod(victim, 0o755)
    swapped = []
    real_lstat, real_open = os.lstat, os.open

    def swap_after(real):
        def look(path, *args, **kwargs):
            out = real(path, *args, **kwargs)
            if os.fspath(path) == os.fspath(loose) and not swapped:
                swapped.append(True)
                os.rename(loose, tmp_path / "moved")
                os.symlink(victim, loose)
            return out

        return look

    monkeypatch.setattr(os, "lstat", swap_after(real_lstat))
    monkeypatch.setattr(os, "open", swap_after(real_open))
    owner_only.tighten(loose)
    monkeypatch.undo()
    assert swapped and _mode(victim) == 0o755


def test_tightening_a_live_database_keeps_sqlites_locks(tmp_path):
    """SQLite's locks are POSIX locks, which a process loses when it closes any descriptor of the
    file: tightening the files of a database this process has open must not close one."""
    import sqlite3
    import subprocess
    import sys

    from ctxscope.inspector.base import owner_only

    db = tmp_path / "captures.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    os.chmod(db, 0o644)
    conn.execute("BEGIN IMMEDIATE")  # holds the write lock
    conn.execute("INSERT INTO t VALUES (1)")
    try:
        assert owner_only.private_store(db)  # it did tighten something
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None);"
                "c.execute('BEGIN IMMEDIATE'); print('got the lock')",
                str(db),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert "got the lock" not in other.stdout and "locked" in other.stderr
