"""A file of captured calls not yet stored, so storing can wait for a pause without risking them.

The capture writer's child process appends every batch the proxy hands over here at once (one
write of bytes already in memory: no parsing, no SQLite), and stores the calls later, when the
traffic pauses, removing them only once they are committed. A batch in the spool survives the
death of every ctxscope process (it is in the OS page cache); the next writer to open the same
database finds the file and stores its calls, skipping those a killed writer had already
committed. Each spool is named after the database and the process that owns it and held under an
exclusive ``flock``, so a spool is only ever recovered from a writer that is gone, and by one new
writer only.

The format cannot run code, whoever wrote the file: a 16-byte header (magic and version), then
records, each an 8-byte little-endian payload length, the payload's CRC32 (4 bytes) and the
payload: a 4-byte length, a JSON list of the calls' fields with each body replaced by its length,
then the bodies' raw bytes (no copy or base64 of a 1 MB body on the way in). Reading is strict:
a field of the wrong type, a length that does not add up or a checksum that does not match makes
the record corrupt.

A spool left by another writer is only read when it is a regular file of this user, writable by
nobody else, with the header: anything else (a planted file, a pickle spool of an older version,
garbage) is quarantined: renamed ``<spool>.quarantined-<time>``, logged and counted, never read.
A record cut short at the end is what a crash mid-append leaves: it is dropped and counted (its
calls were never acknowledged to the proxy). A corrupt record ends the reading: the records before
it are kept and the file is quarantined.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

MAGIC = b"ctxscope-spool\0"
VERSION = 2
HEADER = MAGIC + bytes([VERSION])
_RECORD = struct.Struct("<QI")  # payload length, CRC32 of the payload
_JSON_LEN = struct.Struct("<I")
SUFFIX = ".spool-"
QUARANTINED = ".quarantined-"
_OWNER = re.compile(r"\d+(?:\.\d+)?")  # what follows SUFFIX in a spool's name (owner pid[.n])
_IOV_MAX = 512  # pieces per writev call (the system limit is at least 1024)
_CHECK_PIECE = 1 << 20  # bytes read at a time to verify a record's checksum


class SpoolCorrupt(ValueError):
    """A record that is complete but not what a writer wrote: wrong checksum, type or length."""


class _Torn(Exception):
    """The file ends inside a record: a crash mid-append."""


# -- the record codec --------------------------------------------------------------------------

def _opt(kind):
    return lambda v: v is None or kind(v)


def _pairs(v) -> bool:
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in v)


_CHECKS = {  # an Exchange field's annotation -> a check of its JSON value (other kinds: any JSON value)
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: type(v) is bool,
    "int": lambda v: type(v) is int,
    "str | None": _opt(lambda v: isinstance(v, str)),
    "int | None": _opt(lambda v: type(v) is int),
    "float": lambda v: type(v) in (int, float),
    "float | None": _opt(lambda v: type(v) in (int, float)),
    "dict": lambda v: isinstance(v, dict),
    "tuple[tuple[str, str], ...]": _pairs,
    "bytes": lambda v: type(v) is int and v >= 0,  # the body's length; its bytes follow the JSON
}
_FIELDS = dataclasses.fields(Exchange)
_KINDS = [str(f.type) for f in _FIELDS]
_VALID = [_CHECKS.get(kind, lambda v: True) for kind in _KINDS]
# A spool written before fields with defaults were added still reads: they take their defaults.
_REQUIRED = sum(1 for f in _FIELDS if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
_BODIES = [i for i, kind in enumerate(_KINDS) if kind == "bytes"]
_PAIRS = [i for i, kind in enumerate(_KINDS) if kind.startswith("tuple[")]
_FLOATS = [i for i, kind in enumerate(_KINDS) if kind.startswith("float")]


def encode(batch: list[tuple]) -> list[bytes]:
    """The pieces of one record (header first) for a batch of Exchange field tuples."""
    heads, bodies = [], []
    for fields in batch:
        head = list(fields)
        for i in _BODIES:
            head[i] = len(fields[i])
            bodies.append(fields[i])
        heads.append(head)
    text = json.dumps(heads, separators=(",", ":"), default=str).encode()
    pieces = [_JSON_LEN.pack(len(text)), text, *bodies]
    crc, size = 0, 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
    return [_RECORD.pack(size, crc), *pieces]


def decode(payload: bytes) -> list[tuple]:
    """The batch in a record's payload (its checksum already verified); SpoolCorrupt if malformed."""
    if len(payload) < _JSON_LEN.size:
        raise SpoolCorrupt("record too short")
    (n,) = _JSON_LEN.unpack_from(payload)
    at = _JSON_LEN.size + n
    if at > len(payload):
        raise SpoolCorrupt("field list longer than its record")
    try:
        heads = json.loads(payload[_JSON_LEN.size:at])
    except (ValueError, RecursionError) as exc:
        raise SpoolCorrupt(f"unreadable field list ({exc})") from None
    if not isinstance(heads, list):
        raise SpoolCorrupt("the field list is not a list")
    view, batch = memoryview(payload), []
    for head in heads:
        if not isinstance(head, list) or not _REQUIRED <= len(head) <= len(_VALID):
            raise SpoolCorrupt("a call with the wrong number of fields")
        for field in _FIELDS[len(head):]:
            head.append(field.default_factory() if field.default is dataclasses.MISSING else field.default)
        for field, valid, value in zip(_FIELDS, _VALID, head):
            if not valid(value):
                raise SpoolCorrupt(f"field {field.name} has the wrong type")
        for i in _BODIES:
            end = at + head[i]
            if end > len(payload):
                raise SpoolCorrupt("a body longer than its record")
            head[i], at = bytes(view[at:end]), end
        for i in _PAIRS:
            head[i] = tuple((k, v) for k, v in head[i])
        for i in _FLOATS:
            if head[i] is not None:
                head[i] = float(head[i])
        batch.append(tuple(head))
    if at != len(payload):
        raise SpoolCorrupt("bytes left over after the last body")
    return batch


def _read_record(fd: int, at: int, size: int, verify: bool = True) -> tuple[list[tuple], int]:
    """The batch of the record at ``at`` and the offset after it. ``verify=False`` skips the
    checksum (a writer reading back what it appended itself moments ago: 0.2 ms per MB saved)."""
    head = os.pread(fd, _RECORD.size, at)
    if len(head) < _RECORD.size:
        raise _Torn
    n, crc = _RECORD.unpack(head)
    if n > size - at - _RECORD.size:
        raise _Torn
    if verify and _checksum(fd, at + _RECORD.size, n) != crc:
        raise SpoolCorrupt("checksum mismatch")
    payload = os.pread(fd, n, at + _RECORD.size)
    if len(payload) < n:
        raise _Torn
    return decode(payload), at + _RECORD.size + n


def _checksum(fd: int, at: int, n: int) -> int:
    """The CRC32 of ``n`` bytes at ``at``, read a piece at a time: a hostile file's declared
    length is only trusted, and allocated, once its checksum matched."""
    crc, end = 0, at + n
    while at < end:
        piece = os.pread(fd, min(_CHECK_PIECE, end - at), at)
        if not piece:
            raise _Torn
        crc = zlib.crc32(piece, crc)
        at += len(piece)
    return crc


def _write_pieces(fd: int, pieces: list[bytes]) -> None:
    views = [memoryview(p).cast("B") for p in pieces if len(p)]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        while done:
            if done >= len(views[0]):
                done -= len(views.pop(0))
            else:
                views[0], done = views[0][done:], 0


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
        out = [n for n in out if rest.fullmatch(n[len(prefix):])]
    return [db_path.parent / n for n in sorted(out)]


def spool_files(db_path: Path) -> list[Path]:
    """Every spool next to a database, live or left behind (quarantined ones excluded)."""
    return _named(db_path, _OWNER)


def quarantined_files(db_path: Path) -> list[Path]:
    return _named(db_path, re.compile(_OWNER.pattern + re.escape(QUARANTINED) + r".+"))


def quarantine(path: Path, why: str) -> Path | None:
    """Rename a spool aside so no writer reads it; returns its new path (None if it cannot move)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 10**9:09d}"
    aside = path.with_name(f"{path.name}{QUARANTINED}{stamp}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("capture spool %s is unsafe to read (%s) and cannot be moved aside (%s): it is left "
                  "where it is, unread", path, why, exc)
        return None
    log.error("capture spool %s quarantined as %s, unread: %s. Capture goes on; look at the file, then delete it.",
              path, aside.name, why)
    return aside


# -- a writer's own spool ----------------------------------------------------------------------

class Spool:
    """The append-only spool of one writer process; read back from ``read_at`` in order."""

    def __init__(self, db_path: Path, owner: int | None = None):
        self.path, self._fd = _create(db_path, os.getpid() if owner is None else owner)
        try:
            _write_pieces(self._fd, [HEADER])
        except OSError:
            os.close(self._fd)
            self.path.unlink(missing_ok=True)
            raise
        self.size = self.read_at = len(HEADER)
        self.corrupt = 0  # records of our own that did not read back (a damaged disk)

    def append(self, batch: list[tuple]) -> None:
        """Append one record; on failure (a full disk) the file is cut back to what it held."""
        pieces = encode(batch)
        try:
            _write_pieces(self._fd, pieces)
        except OSError:
            try:
                os.ftruncate(self._fd, self.size)
            except OSError:  # pragma: no cover - shrinking a file needs no space
                pass
            raise
        self.size += sum(len(p) for p in pieces)

    @property
    def holds(self) -> bool:
        """Whether any record was appended since the spool was last emptied."""
        return self.size > len(HEADER)

    @property
    def unread(self) -> bool:
        return self.read_at < self.size

    def next_batch(self) -> list[tuple] | None:
        """The oldest batch not read yet, or None."""
        if self.read_at >= self.size:
            return None
        try:
            batch, self.read_at = _read_record(self._fd, self.read_at, self.size, verify=False)
        except (SpoolCorrupt, _Torn, OSError) as exc:
            log.error("capture spool %s: a record at offset %d does not read back (%s); the calls from there "
                      "on are lost", self.path, self.read_at, exc or "cut short")
            self.corrupt += 1
            self.read_at = self.size
            return None
        return batch

    def clear(self) -> None:
        """Everything appended is stored: start again from the header alone."""
        os.ftruncate(self._fd, len(HEADER))
        self.size = self.read_at = len(HEADER)

    def close(self, *, remove: bool) -> None:
        os.close(self._fd)
        if remove:
            self.path.unlink(missing_ok=True)


def _create(db_path: Path, owner: int) -> tuple[Path, int]:
    """A new, locked, owner-only spool file: never an existing one, never through a symlink."""
    for n in range(1000):
        path = spool_path(db_path, owner if n == 0 else f"{owner}.{n}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except FileExistsError:  # left under a reused pid (being taken over), or planted
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return path, fd
    raise OSError(errno.EEXIST, "no free spool name", str(spool_path(db_path, owner)))


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
    log.error("%d calls that could not be stored are kept in %s: the next writer on %s stores them",
              len(batch), spool.path.name, db_path.name)
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
        """Its batches, oldest first, one at a time; stops at a torn or corrupt record."""
        at = len(HEADER)
        while at < self.size:
            try:
                batch, at = _read_record(self.fd, at, self.size)
            except _Torn:
                self.torn += 1
                log.warning("capture spool %s: dropped a record cut short at offset %d (a crash while writing it; "
                            "its calls had not been acknowledged)", self.path.name, at)
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
    if head == HEADER or (len(head) < len(HEADER) and HEADER.startswith(head) and st.st_size == len(head)):
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
            status["bytes"] += max(0, os.fstat(fd).st_size - len(HEADER))
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a live writer holds its lock
            status["left_by_stopped_writers"] += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    status["quarantined"] = [p.name for p in quarantined_files(db_path)]
    return status
