"""Captured prompts are private: the folders and files that hold them are the owner's alone.

Folders ctxscope creates are 0700 and files 0600. One that already exists with access for the
group or others is tightened on start, and the change is logged as a warning (other local users
could read it until then).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("ctxscope.files")

DIR_MODE = 0o700
FILE_MODE = 0o600


def tighten(path: Path) -> str | None:
    """Remove group and other access from ``path`` (never through a symlink); returns what changed.

    The file is opened without following a symlink and changed through that descriptor, so a
    path swapped for a symlink after the look cannot make us change the mode of another file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # a symlink is not ours to change
            log.warning("%s cannot be checked for access by other users: %s", path, exc)
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            return None  # not ours to change
        old = stat.S_IMODE(st.st_mode)
        if not old & 0o077:
            return None
        new = old & 0o700
        try:
            os.fchmod(fd, new)
        except OSError as exc:
            log.warning("%s is readable by other users (mode %04o) and cannot be made private: %s", path, old, exc)
            return None
    finally:
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
