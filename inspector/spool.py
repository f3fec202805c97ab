"""A file of captured calls not yet stored, so storing can wait for a pause without risking them.

The capture writer's child process appends every batch the proxy hands over here at once (one
write of bytes already in memory: no parsing, no SQLite), and stores the calls later, when the
traffic pauses. A batch in the spool survives the death of every ctxscope process (it is in the
OS page cache); the next writer to open the same database finds the file and stores its calls,
skipping those a killed writer had already committed. Each spool is named after the database and
the process that owns it and held under an exclusive ``flock``, so a spool is only ever recovered
from a writer that is gone, and by one new writer only.

Frames: an 8-byte little-endian length, then a pickle of a list of Exchange field tuples. A frame
cut short by a kill mid-write is ignored (its calls were never acknowledged to the proxy).
"""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ctxscope.store")

_LEN = struct.Struct("<Q")
SUFFIX = ".spool-"


def spool_path(db_path: Path, owner: int) -> Path:
    return db_path.with_name(f"{db_path.name}{SUFFIX}{owner}")


def spool_files(db_path: Path) -> list[Path]:
    """Every spool next to a database, live or left behind, oldest owner id first."""
    return sorted(db_path.parent.glob(db_path.name + SUFFIX + "*"))


class Spool:
    """The append-only spool of one writer process; read back from ``read_at`` in order."""

    def __init__(self, db_path: Path, owner: int | None = None):
        self.path = spool_path(db_path, os.getpid() if owner is None else owner)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(self._fd, 0)  # a file left under our pid (reused since) was taken over first
        self.size = 0
        self.read_at = 0

    def append(self, batch: list[tuple]) -> None:
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(self._fd, _LEN.pack(len(data)) + data)
        self.size += _LEN.size + len(data)

    @property
    def unread(self) -> bool:
        return self.read_at < self.size

    def next_batch(self) -> list[tuple] | None:
        """The oldest batch not read yet, or None."""
        if self.read_at >= self.size:
            return None
        batch, self.read_at = _frame(self._fd, self.read_at, self.size)
        return batch

    def clear(self) -> None:
        """Everything appended is stored: start again from an empty file."""
        os.ftruncate(self._fd, 0)
        self.size = self.read_at = 0

    def close(self, *, remove: bool) -> None:
        os.close(self._fd)
        if remove:
            self.path.unlink(missing_ok=True)


@dataclass
class Orphan:
    """The spool of a writer that is gone, read and locked by its new owner until released."""

    path: Path
    batches: list[list[tuple]]
    fd: int

    def release(self) -> None:
        """Its calls are safe elsewhere (in the new owner's spool): remove the file, drop the lock."""
        self.path.unlink(missing_ok=True)
        os.close(self.fd)


def orphans(db_path: Path) -> list[Orphan]:
    """Spools of writers that are gone (their lock is free), with the batches they hold; each stays
    locked until released, so two writers starting together never both take one over."""
    found = []
    for path in spool_files(db_path):
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its writer is alive, or another new writer is taking it over
            os.close(fd)
            continue
        size, at, batches = os.fstat(fd).st_size, 0, []
        while at < size:
            batch, at = _frame(fd, at, size)
            if batch is None:
                break
            batches.append(batch)
        found.append(Orphan(path, batches, fd))
    return found


def open_spool(db_path: Path, owner: int | None = None) -> tuple[Spool, list[Orphan]]:
    """A new writer's spool, and the spools it takes over. Those are read before the new spool
    exists: one left under the same (reused) process id would otherwise be emptied unread."""
    left = orphans(db_path)
    mine = spool_path(db_path, os.getpid() if owner is None else owner)
    for orphan in left:
        if orphan.path == mine:
            orphan.release()  # its calls are in memory now; the new spool takes the name
    return Spool(db_path, owner), left


def spool_status(db_path: Path) -> dict:
    """The spools next to a database: bytes handed over by a proxy and not stored yet, and how many
    spools were left by writers that are gone (the next writer on the database stores them)."""
    status = {"files": 0, "bytes": 0, "left_by_stopped_writers": 0}
    for path in spool_files(db_path):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            status["files"] += 1
            status["bytes"] += os.fstat(fd).st_size
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a live writer holds its lock
            status["left_by_stopped_writers"] += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return status


def _frame(fd: int, at: int, size: int) -> tuple[list[tuple] | None, int]:
    """The batch at offset ``at`` and the offset after it; None for a frame cut short or unreadable."""
    head = os.pread(fd, _LEN.size, at)
    if len(head) < _LEN.size:
        return None, size
    (n,) = _LEN.unpack(head)
    if at + _LEN.size + n > size:
        log.warning("capture spool: ignoring a batch cut short at offset %d", at)
        return None, size
    data = os.pread(fd, n, at + _LEN.size)
    try:
        return pickle.loads(data), at + _LEN.size + n
    except Exception as exc:
        log.error("capture spool: unreadable batch at offset %d (%s)", at, exc)
        return None, size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
