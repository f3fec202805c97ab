"""A running capture writer's live counters, in a small file next to the database.

`ctxscope db status` runs in another process and reads the database; while the database cannot be
written (a full disk, a corrupt or unreachable file) the failures cannot be recorded there, so
the writer publishes its counters here too: ``<db>.writer-<pid>``, owner-only, locked by the
writer while it runs (a file whose lock is free was left by a writer that is gone). The file is
written once at its full size when it is created and then rewritten in place, so publishing needs
no new disk space on a full disk.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("ctxscope.store")

SUFFIX = ".writer-"
SIZE = 16384
_OWNER = re.compile(r"\d+(?:\.\d+)?")


def _files(db_path: Path) -> list[Path]:
    try:
        names = os.listdir(db_path.parent)
    except OSError:
        return []
    prefix = db_path.name + SUFFIX
    return [db_path.parent / n for n in sorted(names) if n.startswith(prefix) and _OWNER.fullmatch(n[len(prefix):])]


def _is_stale(path: Path) -> bool:
    """A status file whose lock is free: its writer is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class StatusFile:
    """This writer's status file; publishing is best effort (a writer never fails for it)."""

    def __init__(self, db_path: Path):
        self.path: Path | None = None
        self._fd: int | None = None
        for stale in _files(db_path):
            if _is_stale(stale):
                stale.unlink(missing_ok=True)
        try:
            self.path, self._fd = self._create(db_path)
            os.pwrite(self._fd, b" " * SIZE, 0)
        except OSError as exc:
            log.warning("capture writer: cannot create its status file next to %s (%s); `ctxscope db status` "
                        "will not show its live counters", db_path, exc)
            self.close()

    @staticmethod
    def _create(db_path: Path) -> tuple[Path, int]:
        for n in range(1000):
            owner = f"{os.getpid()}" + (f".{n}" if n else "")
            path = db_path.with_name(f"{db_path.name}{SUFFIX}{owner}")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return path, fd
        raise OSError(errno.EEXIST, "no free status file name")

    def publish(self, status: dict) -> None:
        if self._fd is None:
            return
        data = json.dumps(status, default=str).encode()
        if len(data) > SIZE:
            status = dict(status, last_error=str(status.get("last_error"))[:1000])
            data = json.dumps(status, default=str).encode()[:SIZE]
        try:
            os.pwrite(self._fd, data.ljust(SIZE), 0)
        except OSError:
            pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class StatusPublisher:
    """Publishes ``stats()`` to a status file whenever it changed, every ``interval`` seconds."""

    def __init__(self, db_path: Path, stats: Callable[[], object], interval: float = 0.5):
        self._stats = stats
        self._interval = interval
        self._file = StatusFile(db_path)
        self._stop = threading.Event()
        self._last: dict | None = None
        self._thread = threading.Thread(target=self._run, name="ctxscope-writer-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.publish()

    def publish(self) -> None:
        try:
            stats = self._stats()
            status = dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else dict(stats)  # type: ignore[arg-type]
        except Exception:  # pragma: no cover - a status must never take the writer down
            return
        status["pid"] = os.getpid()
        if status != self._last:
            self._file.publish(status)
            self._last = status

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._file.close()


def live_status(db_path: Path) -> list[dict]:
    """The published counters of every writer running on a database."""
    out = []
    for path in _files(db_path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                continue  # not written by a writer of ours
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                continue  # its writer is gone
            except OSError:
                pass
            status = None
            for _ in range(5):  # a read may meet a rewrite half done: read again
                try:
                    status = json.loads(os.pread(fd, SIZE, 0))
                    break
                except ValueError:
                    time.sleep(0.01)
        finally:
            os.close(fd)
        if isinstance(status, dict):
            out.append(status)
    return out


def capture_state(db_path: Path) -> dict:
    """A summary of the running writers' counters: whether capture is storing, and if not, since
    when, how often it failed, why, and how many calls wait."""
    live = live_status(db_path)
    if not live:
        return {"state": "no writer running"}
    failing = [w for w in live if w.get("store_down_since") or not w.get("running")]
    since = [w["store_down_since"] for w in failing if w.get("store_down_since")]
    errors = [w.get("last_error") for w in live if w.get("last_error")]
    return {
        "state": "store failing" if failing else "storing",
        "since": min(since) if since else None,
        "failures": sum((w.get("store_failures") or 0) + (w.get("failed") or 0) + (w.get("dropped") or 0) for w in live),
        "waiting": sum(w.get("queued") or 0 for w in live),
        "stored": sum(w.get("written") or 0 for w in live),
        "last_error": errors[-1] if errors else None,
        "writers": live,
    }
