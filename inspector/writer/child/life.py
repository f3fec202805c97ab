"""The capture writer's child process: spool what the proxy hands over, store it in a pause.

Every batch is appended to a :class:`~ctxscope.inspector.writer.spool.Spool` the moment it arrives (a
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

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.ingest import Analyzer
from ctxscope.inspector.writer import spool as spools
from ctxscope.inspector.writer.child.deferred import Deferred, take_over
from ctxscope.inspector.writer.messages import (
    Counters,
    Deleted,
    DeleteSession,
    Failed,
    Forget,
    FromChild,
    Ready,
    Received,
    Recovered,
    Stop,
    Taken,
)
from ctxscope.inspector.writer.priority import Priority
from ctxscope.inspector.writer.protocol import IDLE_RELEASE, RETRY_INTERVAL
from ctxscope.inspector.writer.spool import SPOOL_LIMIT
from ctxscope.inspector.writer.thread import CaptureWriter
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE
from ctxscope.vocab.heap import release_heap, tune_heap

log = logging.getLogger("ctxscope.store")

STATS_INTERVAL = 0.25
RELEASE_WAIT = 30.0  # seconds the idle child waits for its writer to let go of its caches
FEED_INTERVAL = 0.01  # while the writer is full: how soon to look again (reading the pipe meanwhile)


def load_factory(spec: str | None, args: tuple[str, ...] = ()) -> list[Analyzer]:
    """'package.module:function' -> the analyzers ``function(*args)`` returns (none for None)."""
    if not spec:
        return []
    module_name, _, attr = spec.partition(":")
    return list(getattr(importlib.import_module(module_name), attr)(*args))


# Run by migrate_apart: the migrations' own process, with the search text reader a migration may read through.
_MIGRATE = ("import sys; from ctxscope.inspector.search_text import SegmentTexts; "
            "from ctxscope.inspector.store import db; db.open_handle(sys.argv[1], segment_texts=SegmentTexts).close()")


def migrate_apart(db_path: Path) -> None:
    """Bring the store's schema up to date in a short-lived process of its own when a migration is due
    (a new file, an upgrade): migrating loads sqlite-utils, which this process would then hold for its
    whole life (docs/architecture.md, "Memory"). What fails here is left to the writer, which opens
    (and migrates) the store itself, or reports it unavailable and retries."""
    try:
        db = store.open_handle(db_path, migrate=False)
        try:
            due = bool(store.pending_migrations(db))
        finally:
            db.close()
    except Exception:
        return
    if due:
        subprocess.run([sys.executable, "-c", _MIGRATE, str(db_path)], stdin=subprocess.DEVNULL, check=False)


def _delete(writer: CaptureWriter, request: DeleteSession) -> Deleted:
    """A deletion, done by this child's writer thread between two of its batches."""
    try:
        return Deleted(request.request, result=writer.delete_session(request.session, request.timeout))
    except Exception as e:
        return Deleted(request.request, error=str(e))


class Inbox(Protocol):
    """What the proxy sends (``entry.PipeInbox``); ``get`` raises EOFError once the proxy is gone."""

    def wait(self, timeout: float | None = None) -> bool: ...

    def get(self, timeout: float | None = None) -> Received | None: ...


class Replies(Protocol):
    """What the child says to the proxy (``entry.PipeReplies``); never raises."""

    def put(self, message: FromChild) -> None: ...


def child_main(db_path: str | Path, *, inbox: Inbox, replies: Replies, factory: str | None = None,
               factory_args: tuple[str, ...] | list[str] = (), nice: int = 10, batch_interval: float = 0.2,
               idle_class: bool = True, quiet_after: float = 1.0, max_decoded_bytes: int = DEFAULT_MAX_SIZE,
               retry_interval: float = RETRY_INTERVAL, max_spool_bytes: int = SPOOL_LIMIT,
               idle_release: float = IDLE_RELEASE, capture_epoch: int | None = None) -> None:
    """The child's whole life; ``quiet_after``: silence that means the proxy holds no calls;
    ``idle_release``: silence, everything stored, before it lets go of its caches;
    ``capture_epoch``: the epoch a child started after an idle spell continues (None: a new one)."""
    tune_heap(1)  # before any thread starts (docs/architecture.md, "Memory")
    # Ctrl-C and a closed terminal's SIGHUP reach the whole process group; the parent decides when we stop.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.suppress(OSError):
        os.nice(nice)
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
    priority = Priority(idle_class)
    priority.set_idle(True)
    replies.put(Ready(writer.capture_epoch, writer.stats().last_error if writer.store_down else None))
    parent = os.getppid()
    deferred = Deferred(spool, writer, max_spool_bytes)
    deferred.quarantined = len(quarantined)
    if spool is None:
        for orphan in left:
            orphan.keep()
        left = []
    replies.put(Recovered(take_over(left, deferred)))
    deferred.storing = deferred.pending()
    last_stats, sent, last_batch = 0.0, None, time.monotonic()

    quiet = False  # nothing to do until the proxy sends something (or goes)
    trimmed = True  # the heap was given back since the last work (docs/architecture.md, "Memory")
    # The caches were let go of since the last work (idle_release). A new child has none yet, but
    # its first idle spell counts too: the proxy then lets a child that got no work go as well.
    released = False
    while True:
        if quiet and not trimmed:  # everything is stored: what the burst used goes back to the system
            release_heap()
            trimmed = True
        if quiet and not inbox.wait(None if released else idle_release):
            # no timer but this one, once: idle for idle_release, the writer lets go of its caches
            # The counters sent next must hold its count: an idle child sends none after them.
            writer.release_memory().wait(RELEASE_WAIT)
            deferred.settle(empty=True)  # the stored records kept for the next calls' new bytes go too
            released = True
        fed = deferred.feed() if deferred.storing else True
        wait = FEED_INTERVAL if not fed and not writer.store_down else STATS_INTERVAL
        try:
            item = inbox.get(timeout=wait)
        except (EOFError, OSError):
            break  # the proxy was killed (or stops us by closing the pipe): store what we received, then go
        if isinstance(item, Stop):
            break
        if isinstance(item, DeleteSession):
            replies.put(_delete(writer, item))
            continue
        if isinstance(item, Forget):  # the proxy was idle: the buffers of the bodies it sent can go
            deferred.bodies.clear()
            trimmed = False
            continue
        now = time.monotonic()
        pause = now - last_batch >= quiet_after
        if item is not None:
            trimmed = released = False
            if item.dropped:  # recorded with the writer's next commit
                writer.count_dropped(item.dropped, "the proxy's capture queue was full")
            pause = item.pause
            deferred.add_record(item, now)
            replies.put(Taken(deferred.received))
            last_batch = now
            if not pause and not deferred.due(now):
                deferred.storing = False  # traffic again: only spool (the writer finishes what it has)
        if deferred.pending() and (pause or deferred.due(now)):
            deferred.storing = True
        priority.update(deferred.behind(), now)
        deferred.settle()
        quiet = False
        if now - last_stats >= STATS_INTERVAL:  # not per hand-over: ``Taken`` acknowledges each
            settled = item is None and deferred.settled()  # before the counters: they are then final
            if settled and not trimmed:  # the heap goes back before the counters say all is stored
                release_heap()
                trimmed = True
            counters = Counters(deferred.stats(), deferred.received)
            if counters != sent:  # an idle child sends nothing: the parent may not read for hours
                replies.put(counters)
                sent = counters
            else:
                quiet = settled
            last_stats = now
        if item is None and os.getppid() != parent:
            break  # the parent was killed: store what we received, then go
    priority.set_idle(False)  # draining is all that is left to do: do not wait for an idle CPU
    deferred.drain()
    drained = writer.stop()
    deferred.settle(empty=True)
    spool = deferred.spool  # created late, perhaps, if it could not be at first
    lost = deferred.lost_at_stop()
    if lost:
        deferred.dropped += lost
        log.error("capture writer: %d calls held in memory (the spool could not be written) could not be stored "
                  "before it stopped: they are lost", lost)
    if spool is not None:
        if spool.holds:
            log.error("capture writer: %d calls are kept in %s until a writer can store them",
                      deferred.stats()["queued"], spool.path.name)
        spool.close(remove=drained and not spool.holds)
    replies.put(Counters(deferred.stats(), deferred.received))
