"""A file of captured calls not yet stored, so storing can wait for a pause without risking them.

The capture writer's child process appends every batch the proxy hands over here at once (one
write of bytes already in memory: no parsing, no SQLite), and stores the calls later, when the
traffic pauses, removing them only once they are committed. A batch in the spool survives the
death of every ctxscope process (it is in the OS page cache); the next writer to open the same
database finds the file and stores its calls, skipping those a killed writer had already
committed. Each spool is named after the database and the process that owns it and held under an
exclusive ``flock``, so a spool is only ever recovered from a writer that is gone, and by one new
writer only.

The records' format is in :mod:`~ctxscope.inspector.writer.wire.spool_format`; it cannot run code, whoever
wrote the file.

A spool left by another writer is only read when it is a regular file of this user, writable by
nobody else, with the header: anything else (a planted file, a pickle spool of an older version,
garbage) is quarantined: renamed ``<spool>.quarantined-<time>``, logged and counted, never read.
A record cut short at the end is what a crash mid-append leaves: it is dropped and counted (its
calls were never acknowledged to the proxy). A corrupt record ends the reading: the records before
it are kept and the file is quarantined.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxscope.inspector.base import owner_only
from ctxscope.inspector.writer.wire.body_delta import Incoming, SpooledBodies
from ctxscope.inspector.writer.wire.spool_format import (
    HEADER,
    MAGIC,
    READABLE,
    STORED_MARK,
    SpoolCorrupt,
    Torn,
    encode,
    read_record,
    stored_up_to,
    write_pieces,
)

log = logging.getLogger("ctxscope.store")

SPOOL_LIMIT = 1 << 40  # a cap on the unstored bytes the spool holds; below it, its disk's room decides (spool_room)

SUFFIX = ".spool-"
QUARANTINED = ".quarantined-"


# -- names -------------------------------------------------------------------------------------


def spool_path(db_path: Path, owner: int | str) -> Path:
    return db_path.with_name(f"{db_path.name}{SUFFIX}{owner}")


def _named(db_path: Path, rest: re.Pattern | None) -> list[Path]:
    try:
        names = os.listdir(db_path.parent)
    except OSError:
        return []
    prefix = db_path.name + SUFFIX
    out = [n for n in names if n.startswith(prefix)]
    if rest is not None:
        out = [n for n in out if rest.fullmatch(n[len(prefix) :])]
    return [db_path.parent / n for n in sorted(out)]


def spool_files(db_path: Path) -> list[Path]:
    """Every spool next to a database, live or left behind (quarantined ones excluded)."""
    return _named(db_path, owner_only.OWNER_NAME)


def quarantined_files(db_path: Path) -> list[Path]:
    return _named(db_path, re.compile(owner_only.OWNER_NAME.pattern + re.escape(QUARANTINED) + r".+"))


def quarantine(path: Path, why: str) -> Path | None:
    """Rename a spool aside so no writer reads it; returns its new path (None if it cannot move)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 10**9:09d}"
    aside = path.with_name(f"{path.name}{QUARANTINED}{stamp}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error(
            "capture spool %s is unsafe to read (%s) and cannot be moved aside (%s): it is left where it is, unread",
            path,
            why,
            exc,
        )
        return None
    log.error(
        "capture spool %s quarantined as %s, unread: %s. Capture goes on; look at the file, then delete it.",
        path,
        aside.name,
        why,
    )
    return aside


# -- a writer's own spool ----------------------------------------------------------------------


class Spool:
    """The append-only spool of one writer process; read back from ``read_at`` in order."""

    def __init__(self, db_path: Path, owner: int | None = None):
        self.path, self._fd = owner_only.create_locked(
            lambda o: spool_path(db_path, o), os.getpid() if owner is None else owner, os.O_APPEND
        )
        try:
            write_pieces(self._fd, [HEADER])
        except OSError:
            os.close(self._fd)
            self.path.unlink(missing_ok=True)
            raise
        self.size = self.read_at = self.stored_to = len(HEADER)  # ``stored_to``: the records before are stored
        self.corrupt = 0  # records of our own that did not read back (a damaged disk)
        self._recent = SpooledBodies()  # where large request bodies lie, for later ones to refer to

    def append(self, batch: list[tuple]) -> None:
        """Append one record; on failure (a full disk) the file is cut back to what it held."""
        self._write(encode(batch))

    def append_incoming(self, incoming: Incoming) -> None:
        """Append a hand-over as it came off the pipe: its payload as the proxy encoded it, but for
        a large request body that repeats one this file holds, of which only the new bytes are
        written (then in records of its own when it repeats one of the same hand-over: a record
        refers only to those before it; docs/architecture.md, "New bytes only")."""
        plan = self._recent.plan(incoming, self.size)
        self._write([piece for record in plan.records for piece in record])
        self._recent.written(plan)

    def _write(self, pieces: list) -> None:
        try:
            write_pieces(self._fd, pieces)
        except OSError:
            with contextlib.suppress(OSError):  # shrinking a file needs no space
                os.ftruncate(self._fd, self.size)
            raise
        self.size += sum(len(p) for p in pieces)

    @property
    def holds(self) -> bool:
        """Whether it holds records not stored yet (appended since it was last emptied or marked)."""
        return self.size > self.stored_to

    @property
    def unstored_size(self) -> int:
        """The file's size without the stored records it keeps: what the spool's limit counts."""
        return self.size - self.stored_to + len(HEADER)

    def mark_stored(self) -> None:
        """Everything appended is stored, but the file is kept, so the next large request bodies
        can still be written as the new bytes they add to those in it; a marker record says so to
        anyone who reads the file (``db status``, a writer taking it over after a crash)."""
        self._write([STORED_MARK])
        self.stored_to = self.read_at = self.size

    @property
    def unread(self) -> bool:
        return self.read_at < self.size

    def next_batch(self) -> list[tuple] | None:
        """The oldest batch not read yet, or None."""
        if self.read_at >= self.size:
            return None
        try:
            batch, self.read_at = read_record(self._fd, self.read_at, self.size, verify=False)
        except (SpoolCorrupt, Torn, OSError) as exc:
            log.error(
                "capture spool %s: a record at offset %d does not read back (%s); the calls from there on are lost",
                self.path,
                self.read_at,
                exc or "cut short",
            )
            self.corrupt += 1
            self.read_at = self.size
            return None
        return batch

    def clear(self) -> None:
        """Everything appended is stored: start again from the header alone."""
        os.ftruncate(self._fd, len(HEADER))
        self.size = self.read_at = self.stored_to = len(HEADER)
        self._recent.clear()

    def close(self, *, remove: bool) -> None:
        os.close(self._fd)
        if remove:
            self.path.unlink(missing_ok=True)


def keep_leftovers(db_path: Path, batch: list[tuple]) -> Path | None:
    """Write calls no writer could store into a spool of their own, left (unlocked) for the next
    writer on the database; its path, or None if even that failed."""
    try:
        spool = Spool(db_path)
        try:
            spool.append(batch)
        except OSError:
            spool.close(remove=True)
            raise
        spool.close(remove=False)
    except OSError as exc:
        log.error("could not keep %d unstored calls in a spool either (%s): they are lost", len(batch), exc)
        return None
    log.error(
        "%d calls that could not be stored are kept in %s: the next writer on %s stores them",
        len(batch),
        spool.path.name,
        db_path.name,
    )
    return spool.path


# -- spools of writers that are gone -----------------------------------------------------------


@dataclass
class Orphan:
    """The spool of a writer that is gone, locked by its new owner until released or kept."""

    path: Path
    fd: int
    size: int
    torn: int = 0  # records cut short at the end (a crash mid-append), dropped
    corrupt: str | None = None  # why reading stopped early, if a record was corrupt

    def batches(self) -> Iterator[list[tuple]]:
        """Its batches not stored yet (after its last ``STORED_MARK``), oldest first, one at a time;
        stops at a torn or corrupt record."""
        at = stored_up_to(self.fd, self.size)
        while at < self.size:
            try:
                batch, at = read_record(self.fd, at, self.size)
            except Torn:
                self.torn += 1
                log.warning(
                    "capture spool %s: dropped a record cut short at offset %d (a crash while writing it; "
                    "its calls had not been acknowledged)",
                    self.path.name,
                    at,
                )
                return
            except (SpoolCorrupt, OSError) as exc:
                self.corrupt = f"corrupt record at offset {at}: {exc}"
                return
            yield batch

    def release(self) -> Path | None:
        """Its calls are safe elsewhere: remove the file (quarantine it if it was corrupt), drop the lock.
        Returns the quarantined path, if any."""
        try:
            if self.corrupt:
                return quarantine(self.path, self.corrupt + " (the calls before it were kept, the rest is left unread)")
            self.path.unlink(missing_ok=True)
            return None
        finally:
            os.close(self.fd)

    def keep(self) -> None:
        """Leave the file for the next writer (its calls could not be kept elsewhere)."""
        os.close(self.fd)


def _foreign(fd: int) -> str | None:
    """Why a spool left by another writer must not be read, or None if it is safe."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    head = os.pread(fd, len(HEADER), 0)
    if head in READABLE or (len(head) < len(HEADER) and HEADER.startswith(head) and st.st_size == len(head)):
        return None  # a spool, or one whose creator died before its header was written
    if head.startswith(MAGIC):
        return f"a spool of another format version ({head[len(MAGIC)]})"
    return "not a ctxscope spool (no spool header; older versions' pickle spools are never read)"


def _still_at(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``: a lock taken on a file that another
    writer has since removed or moved aside must not let us read it, or move its successor."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def orphans(db_path: Path, quarantined: list[Path] | None = None) -> list[Orphan]:
    """Spools of writers that are gone (their lock is free), ready to read; each stays locked until
    released, so two writers starting together never both take one over. Unsafe ones are
    quarantined (their new paths appended to ``quarantined``) and not returned."""
    found = []
    for path in spool_files(db_path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError as exc:  # a symlink, say
            aside = quarantine(path, f"cannot be opened safely ({exc.strerror})")
            if aside is not None and quarantined is not None:
                quarantined.append(aside)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its writer is alive, or another new writer is taking it over
            os.close(fd)
            continue
        if not _still_at(path, fd):  # taken over (stored or quarantined) by another writer meanwhile
            os.close(fd)
            continue
        why = _foreign(fd)
        if why is not None:
            aside = quarantine(path, why)
            os.close(fd)
            if aside is not None and quarantined is not None:
                quarantined.append(aside)
            continue
        found.append(Orphan(path, fd, os.fstat(fd).st_size))
    return found


def spool_status(db_path: Path) -> dict:
    """The spools next to a database: bytes handed over by a proxy and not stored yet, how many
    spools were left by writers that are gone (the next writer on the database stores them), and
    the spools quarantined as unsafe to read."""
    status: dict = {"files": 0, "bytes": 0, "left_by_stopped_writers": 0}
    for path in spool_files(db_path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            status["files"] += 1
            size = os.fstat(fd).st_size
            status["bytes"] += max(0, size - stored_up_to(fd, size))
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a live writer holds its lock
            status["left_by_stopped_writers"] += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    status["quarantined"] = [p.name for p in quarantined_files(db_path)]
    return status
