"""A running capture writer's live counters, in a small file next to the database.

`ctxscope db status` runs in another process and reads the database; while the database cannot be
written (a full disk, a corrupt or unreachable file) the failures cannot be recorded there, so
the writer publishes its counters here too: ``<db>.writer-<pid>``, owner-only, locked by the
writer while it runs (a file whose lock is free was left by a writer that is gone). The file is
written once at its full size when it is created and then rewritten in place, so publishing needs
no new disk space on a full disk. When it cannot be created next to the database (that disk was
full before the writer started, or the folder cannot be made), it goes to the user's runtime
folder (``$XDG_RUNTIME_DIR``, else /dev/shm, else the temp folder) under ``ctxscope-<uid>/``,
named after the database's path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxscope.inspector.base import owner_only
from ctxscope.vocab.heap import release_heap

log = logging.getLogger("ctxscope.store")

SUFFIX = ".writer-"
SIZE = 16384


@dataclass(frozen=True)
class WriterStats:
    """Live counters of this writer (persisted totals across runs are in ``store_events``)."""

    queued: int = 0  # waiting to be stored now
    queued_bytes: int = 0  # their request + response bytes
    written: int = 0  # calls committed
    failed: int = 0  # exchanges that could not be stored (given up)
    dropped: int = 0  # exchanges refused because the queue was full or the writer was stopped
    analysis_failed: int = 0  # analyzer exceptions (the call itself was kept)
    parse_failed: int = 0  # responses the parser choked on (raw bytes kept)
    commits: int = 0
    last_error: str | None = None
    running: bool = False
    already_stored: int = 0  # calls found already stored (from a recovered spool): not stored twice
    store_failures: int = 0  # failed attempts to open or write the store (or writer processes that died)
    store_down_since: str | None = None  # when the current store outage began; None while storing works
    restarts: int = 0  # writer processes started again after one died
    spools_quarantined: int = 0  # spool files renamed aside as unsafe to read
    spool_records_torn: int = 0  # records cut short by a crash mid-append, dropped
    spool_failures: int = 0  # appends to the spool that failed (the calls were held in memory)
    in_memory: int = 0  # calls held in memory because the spool could not be written
    dropped_spool_full: int = 0  # of the dropped: calls refused because the spool was full (its disk, or its cap)
    idle_releases: int = 0  # times the idle child let go of its caches (docs/architecture.md, "Memory")
    asleep: bool = False  # no child runs: it stopped after an idle spell, and the next call starts one
    submit_failed: int = 0  # of the dropped: calls lost because ``submit`` itself failed (a defect, logged)


def _runtime_dir(create: bool) -> Path | None:
    """This user's private runtime folder for status files, or None if it is missing or not private."""
    base = os.environ.get("XDG_RUNTIME_DIR") or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    path = Path(base) / f"ctxscope-{os.geteuid()}"
    try:
        if create and not path.exists():
            path.mkdir(mode=0o700)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to others: not a place for our status
    return path


def _places(db_path: Path, create: bool = False) -> list[tuple[Path, str]]:
    """(folder, name prefix) where a status file of this database may be, in order of preference."""
    places = [(db_path.parent, db_path.name + SUFFIX)]
    runtime = _runtime_dir(create)
    if runtime is not None:
        key = hashlib.sha256(os.path.realpath(db_path).encode()).hexdigest()[:16]
        places.append((runtime, f"{db_path.name}-{key}{SUFFIX}"))
    return places


def _files(db_path: Path) -> list[Path]:
    found = []
    for folder, prefix in _places(db_path):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [
            folder / n
            for n in sorted(names)
            if n.startswith(prefix) and owner_only.OWNER_NAME.fullmatch(n[len(prefix) :])
        ]
    return found


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
        errors = []
        for folder, prefix in _places(db_path, create=True):
            try:
                self.path, self._fd = owner_only.create_locked(_namer(folder, prefix), os.getpid())
                os.pwrite(self._fd, b" " * SIZE, 0)
                break
            except OSError as exc:
                errors.append(f"{folder}: {exc.strerror or exc}")
                self.close()
        else:
            log.warning(
                "capture writer: cannot create its status file (%s); `ctxscope db status` will not show "
                "its live counters",
                "; ".join(errors),
            )
            return
        if errors:
            log.warning("capture writer: its status file is %s (%s)", self.path, errors[0])

    def publish(self, status: dict) -> None:
        if self._fd is None:
            return
        data = json.dumps(status, default=str).encode()
        if len(data) > SIZE:
            status = dict(status, last_error=str(status.get("last_error"))[:1000])
            data = json.dumps(status, default=str).encode()[:SIZE]
        with contextlib.suppress(OSError):
            os.pwrite(self._fd, data.ljust(SIZE), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def _namer(folder: Path, prefix: str) -> Callable[[str], Path]:
    return lambda owner: folder / f"{prefix}{owner}"


def settled(stats: WriterStats) -> bool:
    """Counters that cannot change until a call comes (or the child dies): nothing waits or fails."""
    return stats.running and stats.queued == 0 and stats.store_down_since is None


class StatusPublisher:
    """Publishes ``stats()`` to a status file whenever it changed, every ``interval`` seconds while
    anything is under way; once the counters are settled and published, it sleeps until ``wake``
    (a call came, the child died): an idle daemon wakes for nothing (docs/architecture.md, "A quiet
    idle daemon")."""

    def __init__(
        self, db_path: Path, stats: Callable[[], WriterStats], interval: float = 0.5, give_back_heap: bool = False
    ):
        self._stats = stats
        self._interval = interval
        self._give_back_heap = give_back_heap  # a writer in this process: nothing else trims after a burst
        self._file = StatusFile(db_path)
        self._stop = threading.Event()
        self._woken = threading.Event()
        self.asleep = False  # read without a lock by ``wake``'s callers, to skip it on the hot path
        self._last: dict | None = None
        self._thread = threading.Thread(target=self._run, name="ctxscope-writer-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self.publish():  # every call is stored (a writer child's heap, and ours, went back then)
                if self._give_back_heap:
                    release_heap()  # docs/architecture.md, "Memory"
                self.asleep = True
                self._woken.wait()
                self._woken.clear()
                self.asleep = False

    def wake(self) -> None:
        self._woken.set()

    def publish(self) -> bool:
        """Publish if changed; True when the counters are settled: nothing changes until a call comes."""
        try:
            stats = self._stats()
            status = dataclasses.asdict(stats)
        except Exception:  # pragma: no cover - a status must never take the writer down
            return False
        status["pid"] = os.getpid()
        if status != self._last:
            self._file.publish(status)
            self._last = status
        return settled(stats)

    def close(self) -> None:
        self._stop.set()
        self._woken.set()
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
        "failures": sum(
            (w.get("store_failures") or 0) + (w.get("failed") or 0) + (w.get("dropped") or 0) for w in live
        ),
        "waiting": sum(w.get("queued") or 0 for w in live),
        "dropped": sum(w.get("dropped") or 0 for w in live),
        "dropped_spool_full": sum(w.get("dropped_spool_full") or 0 for w in live),
        "stored": sum(w.get("written") or 0 for w in live),
        "asleep": all(w.get("asleep") for w in live),  # no writer process runs until the next call
        "last_error": errors[-1] if errors else None,
        "writers": live,
    }
