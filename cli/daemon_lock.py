"""One daemon per home and per database, and the address it records for the other commands.

A second `ctxscope serve` on the same home would overwrite the simulator's token (the first
daemon's simulator then refuses every control call) and write into the same database. So
`serve` takes an exclusive ``flock`` on ``$CTXSCOPE_HOME/daemon.lock`` and on a lock file beside
its database before it touches either; the lock files hold the pid and address of their holder,
so a refused second daemon can name the first. The kernel lets go of a flock when its holder dies,
even by ``kill -9``: a stale file is simply taken over. Once listening, the daemon records its
address in ``$CTXSCOPE_HOME/daemon.json`` (owner-only), removed at a clean stop
(docs/architecture.md, "One daemon per home").

Only the standard library: the commands that read the address import this before anything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

LOCK_FILE = "daemon.lock"
ADDRESS_FILE = "daemon.json"
MAX_RECORD_BYTES = 4096  # a record is a few dozen bytes: a planted file cannot make us read more


class LockError(RuntimeError):
    """The daemon cannot know it is alone (its message is one line for the user)."""


class AlreadyRunning(LockError):
    """Another daemon holds the home or the database."""


def db_lock_path(db: Path) -> Path:
    return db.parent / f".{db.name}.daemon.lock"


def _read_record(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, MAX_RECORD_BYTES, 0) or b"{}")
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _holder(record: dict) -> str:
    pid, url = record.get("pid"), record.get("url")
    pid_text = f"pid {pid}" if isinstance(pid, int) else "pid unknown"
    return f"{pid_text}, {url}" if isinstance(url, str) else f"{pid_text}, still starting"


def _write(fd: int, record: dict) -> None:
    data = json.dumps(record).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@dataclass
class DaemonLock:
    """The flocks this daemon holds (released by ``release`` or by its death)."""

    home: Path
    fds: list[int] = field(default_factory=list)
    recorded: bool = False

    def record(self, url: str, db: Path) -> None:
        """Write our pid and address into the lock files and ``daemon.json`` (owner-only, replaced
        whole so a reader never sees half of it)."""
        record = {"pid": os.getpid(), "url": url, "db": str(db)}
        for fd in self.fds:
            with contextlib.suppress(OSError):  # a full disk: the lock holds all the same
                _write(fd, record)
        path = self.home / ADDRESS_FILE
        tmp = path.with_name(f".{ADDRESS_FILE}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
        self.recorded = True

    def release(self) -> None:
        """Remove ``daemon.json`` if it is still ours, empty the lock files and let go of them."""
        if self.recorded:
            path = self.home / ADDRESS_FILE
            with contextlib.suppress(OSError):
                if recorded_daemon(self.home).get("pid") == os.getpid():
                    path.unlink()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # (closing the last descriptor releases the flock)
        self.fds = []


def acquire(home: Path, db: Path) -> DaemonLock:
    """Lock ``home`` and ``db`` for this daemon; AlreadyRunning names the daemon that holds one.
    The home must exist; OSError when its lock file cannot be made. A database whose folder cannot
    hold a lock file (missing, read-only, a full disk) is not locked: the store fails there on its
    own, and a store failure never stops forwarding (docs/architecture.md, "Store failures never
    break traffic")."""
    lock = DaemonLock(home)
    what = {home / LOCK_FILE: f"the home {home}", db_lock_path(db): f"the database {db}"}
    try:
        for path, name in what.items():
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                if path.name == LOCK_FILE:
                    raise
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(_read_record(fd))
                os.close(fd)
                raise AlreadyRunning(
                    f"another ctxscope daemon ({holder}) already uses {name}: use that one, stop "
                    "it first, or give this one another CTXSCOPE_HOME and --db"
                ) from None
            lock.fds.append(fd)
            with contextlib.suppress(OSError):  # the holder's name is a courtesy; a full disk has no room for it
                _write(fd, {"pid": os.getpid()})
    except BaseException:
        lock.release()
        raise
    return lock


def recorded_daemon(home: Path) -> dict:
    """What ``daemon.json`` in ``home`` says (``url``, ``pid``, ``db``), {} when there is none or
    it is not a private file of this user's."""
    try:
        fd = os.open(home / ADDRESS_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return {}
        return _read_record(fd)
    finally:
        os.close(fd)
