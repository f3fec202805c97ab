"""Captured prompts are private: the folders and files that hold them are the owner's alone.

Folders ctxscope creates are 0700 and files 0600. One that already exists with access for the
group or others is tightened on start, and the change is logged as a warning (other local users
could read it until then).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("ctxscope.files")

DIR_MODE = 0o700
FILE_MODE = 0o600
OWNER_NAME = re.compile(r"\d+(?:\.\d+)?")  # the owner in a per-process file's name: pid, or pid.n
# A reference to a file that does not open it, where its mode can then be changed through /proc.
_REF = getattr(os, "O_PATH", 0) if os.path.isdir("/proc/self/fd") else 0


def tighten(path: Path) -> str | None:
    """Remove group and other access from ``path`` (never through a symlink); returns what changed.

    The path is opened as a bare reference (``O_PATH``, which neither reads the file nor counts
    as an open of it: closing it keeps SQLite's POSIX locks, which closing an ordinary descriptor
    of a database file would drop) without following a symlink, and the mode is changed through
    that reference, so a path swapped for a symlink after the look cannot make us change another
    file. Where there is no ``O_PATH`` or /proc, the path is looked at and changed by name."""
    try:
        fd = os.open(path, _REF | os.O_NOFOLLOW) if _REF else None
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s cannot be checked for access by other users: %s", path, exc)
        return None
    try:
        st = os.fstat(fd) if fd is not None else os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            return None  # not ours to change
        old = stat.S_IMODE(st.st_mode)
        if not old & 0o077:
            return None
        new = old & 0o700
        try:
            os.chmod(f"/proc/self/fd/{fd}" if fd is not None else path, new)
        except OSError as exc:
            log.warning("%s is readable by other users (mode %04o) and cannot be made private: %s", path, old, exc)
            return None
    except FileNotFoundError:
        return None
    finally:
        if fd is not None:
            os.close(fd)
    change = f"{path}: mode {old:04o} -> {new:04o}"
    log.warning("tightened permissions of %s from %04o to %04o: other local users could read it", path, old, new)
    return change


def private_dir(path: Path) -> list[str]:
    """Create ``path`` (and missing parents) owner-only, or tighten it if it exists; raises OSError
    if it cannot be created. Returns the changes made to an existing folder."""
    if not path.exists():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path, DIR_MODE)  # mkdir's mode is filtered through the umask
        return []
    change = tighten(path)
    return [change] if change else []


def private_file(path: Path) -> list[str]:
    """Tighten an existing file to owner-only; returns the change made, if any."""
    change = tighten(path)
    return [change] if change else []


def create_private_file(path: Path) -> None:
    """Create an empty owner-only file if none exists (SQLite then gives its -wal and -shm files the
    same mode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def private_store(db_path: Path) -> list[str]:
    """Tighten a capture database and the files beside it that hold captured calls."""
    changes = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        changes += private_file(db_path.with_name(db_path.name + suffix))
    return changes


def create_locked(path_for: Callable[[str], Path], owner: int, flags: int = 0) -> tuple[Path, int]:
    """A new owner-only file named ``path_for(owner)`` (or ``owner.n`` when that name is taken:
    left under a reused pid, or planted), open read-write and held under an exclusive ``flock``
    (a file whose lock is free was left by a process that is gone). Never an existing file,
    never through a symlink."""
    for n in range(1000):
        path = path_for(str(owner) if n == 0 else f"{owner}.{n}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | flags, FILE_MODE)
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return path, fd
    raise OSError(errno.EEXIST, "no free file name", str(path_for(str(owner))))
