"""The capture writer's child process: spool what the proxy hands over, store it in a pause.

Every batch is appended to a :class:`~ctxscope.inspector.writer.wire.spool.Spool` the moment it arrives (a
write of bytes, nothing more), and stored (parsed, analysed, written to SQLite by the ordinary
:class:`CaptureWriter`) once the traffic pauses: the proxy says so with the batch it sends after
a pause of QUIET_GAP, and silence longer than the proxy ever holds calls means the same. A burst
that goes on for MAX_DEFER seconds is stored while it flows. Storing beside traffic, even in the
idle scheduling class, cost forwarding throughput (interleaved rounds, small JSON at
concurrency 32: 0.79x the minimal passthrough with the writer storing during the phase, 0.95x
with it only receiving; 8 rounds): its work evicts the forwarding processes' caches. The spool keeps the
promise that a call finished more than a second before a kill is stored, even if the proxy and
this process die together: the next writer on the same database stores what the spool holds.
Calls leave the spool only once stored: while the store is unavailable (full disk, unreadable
file) they wait there, and the writer retries; the child starts even when the store cannot be
opened. If the spool itself cannot be written, calls wait in memory, up to MEMORY_LIMIT.

It runs at a low CPU priority (:mod:`~ctxscope.inspector.writer.priority`).
"""

from __future__ import annotations

import importlib
import logging
import signal
import subprocess
import sys
from pathlib import Path

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.derived import titles
from ctxscope.inspector.store.ingest import Analyzer
from ctxscope.inspector.writer.child.deferred import Deferred, take_over
from ctxscope.inspector.writer.child.loop import ChildLoop, Inbox, Replies
from ctxscope.inspector.writer.priority import Priority
from ctxscope.inspector.writer.protocol import IDLE_RELEASE, RETRY_INTERVAL
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.messages import (
    Counters,
    Failed,
    Ready,
    Recovered,
)
from ctxscope.inspector.writer.wire.spool import SPOOL_LIMIT
from ctxscope.inspector.writer.wire.spool_room import RESERVE, SpoolRoom
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE
from ctxscope.vocab.heap import tune_heap

log = logging.getLogger("ctxscope.store")


def load_factory(spec: str | None, args: tuple[str, ...] = ()) -> list[Analyzer]:
    """'package.module:function' -> the analyzers ``function(*args)`` returns (none for None)."""
    if not spec:
        return []
    module_name, _, attr = spec.partition(":")
    return list(getattr(importlib.import_module(module_name), attr)(*args))


# Run by migrate_apart: the migrations' own process, with the search text reader a migration may read through.
# A store older than the session titles is named there too, before the writer stores a call.
_MIGRATE = (
    "import sys; from ctxscope.inspector.pipeline.search_text import SegmentTexts; "
    "from ctxscope.inspector.pipeline.session_titles import backfill_if_pending; "
    "from ctxscope.inspector.store import db; h = db.open_handle(sys.argv[1], segment_texts=SegmentTexts); "
    "backfill_if_pending(h); h.close()"
)


def migrate_apart(db_path: Path) -> None:
    """Bring the store's schema up to date in a short-lived process of its own when a migration is due
    (a new file, an upgrade): migrating loads sqlite-utils, which this process would then hold for its
    whole life (docs/architecture.md, "Memory"). What fails here is left to the writer, which opens
    (and migrates) the store itself, or reports it unavailable and retries."""
    try:
        db = store.open_handle(db_path, migrate=False)
        try:
            due = bool(store.pending_migrations(db)) or titles.pending(db)
        finally:
            db.close()
    except Exception:
        return
    if due:
        subprocess.run([sys.executable, "-c", _MIGRATE, str(db_path)], stdin=subprocess.DEVNULL, check=False)


def child_main(
    db_path: str | Path,
    *,
    inbox: Inbox,
    replies: Replies,
    factory: str | None = None,
    factory_args: tuple[str, ...] | list[str] = (),
    nice: int = 10,
    batch_interval: float = 0.2,
    idle_class: bool = True,
    quiet_after: float = 1.0,
    max_decoded_bytes: int = DEFAULT_MAX_SIZE,
    retry_interval: float = RETRY_INTERVAL,
    max_spool_bytes: int = SPOOL_LIMIT,
    spool_disk_reserve: int = RESERVE,
    idle_release: float = IDLE_RELEASE,
    capture_epoch: int | None = None,
) -> None:
    """The child's whole life: set up, run its loop (``ChildLoop``), drain. ``quiet_after``:
    silence that means the proxy holds no calls;
    ``idle_release``: silence, everything stored, before it lets go of its caches;
    ``capture_epoch``: the epoch a child started after an idle spell continues (None: a new one)."""
    tune_heap(1)  # before any thread starts (docs/architecture.md, "Memory")
    # Ctrl-C and a closed terminal's SIGHUP reach the whole process group; the parent decides when we stop.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    db_path = Path(db_path)
    try:
        migrate_apart(db_path)
        writer = CaptureWriter(
            db_path,
            analyzers=load_factory(factory, tuple(factory_args)),
            batch_interval=batch_interval,
            max_decoded_bytes=max_decoded_bytes,
            retry_interval=retry_interval,
            status_file=False,
            keep_unstored=False,
            capture_epoch=capture_epoch,
        )
        writer.start()  # a store that cannot be opened is reported and retried, not fatal
    except BaseException as e:  # report, do not hang the parent
        replies.put(Failed(f"{type(e).__name__}: {e}"))
        return
    quarantined: list[Path] = []
    left = spools.orphans(db_path, quarantined)
    try:
        spool = spools.Spool(db_path)
    except OSError as exc:
        log.error("capture writer: cannot create its spool next to %s (%s); calls wait in memory", db_path, exc)
        spool = None
    priority = Priority(idle_class, nice)  # only the storing thread yields (priority.py)
    priority.tids = [writer.thread_id]
    priority.set_level(0)
    replies.put(Ready(writer.capture_epoch, writer.stats().last_error if writer.store_down else None))
    room = SpoolRoom(db_path.parent, reserve=spool_disk_reserve, cap=max_spool_bytes)
    deferred = Deferred(spool, writer, max_spool_bytes, quarantined=len(quarantined), room=room)
    if spool is None:
        for orphan in left:
            orphan.keep()
        left = []
    replies.put(Recovered(take_over(left, deferred)))
    if deferred.pending():
        deferred.start_storing()  # what was taken over is stored at once
    loop = ChildLoop(inbox, replies, writer, deferred, priority, quiet_after=quiet_after, idle_release=idle_release)
    loop.run()
    priority.all_threads_ordinary()  # draining is all that is left to do: do not wait for an idle CPU
    deferred.drain()
    drained = writer.stop()
    deferred.settle(empty=True)
    spool = deferred.spool  # created late, perhaps, if it could not be at first
    lost = deferred.lost_at_stop()
    if lost:
        log.error(
            "capture writer: %d calls held in memory (the spool could not be written) could not be stored "
            "before it stopped: they are lost",
            lost,
        )
    if spool is not None:
        if spool.holds:
            log.error(
                "capture writer: %d calls are kept in %s until a writer can store them",
                deferred.stats()["queued"],
                spool.path.name,
            )
        spool.close(remove=drained and not spool.holds)
    replies.put(Counters(deferred.stats(), deferred.received))
    loop.stopped()
