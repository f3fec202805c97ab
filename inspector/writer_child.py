"""The capture writer's child process: spool what the proxy hands over, store it in a pause.

Every batch is appended to a :class:`~ctxscope.inspector.spool.Spool` the moment it arrives (a
write of bytes, nothing more), and stored (parsed, analysed, written to SQLite by the ordinary
:class:`CaptureWriter`) once the traffic pauses: the proxy says so with the batch it sends after
a pause of QUIET_GAP, and silence longer than the proxy ever holds calls means the same. A burst
that goes on for MAX_DEFER seconds is stored while it flows. Storing beside traffic, even in the
idle scheduling class, cost forwarding throughput (interleaved rounds, small JSON at
concurrency 32: 0.79x the minimal passthrough with the writer storing during the phase, 0.95x
with it only receiving; 8 rounds): its work evicts the forwarding processes' caches. The spool keeps the
promise that a call finished more than a second before a kill is stored, even if the proxy and
this process die together: the next writer on the same database stores what the spool holds.

The priority: nice 10 alone did not keep the child out of the way. On a 2-core machine under the
bench's c32 load, a niced child that is behind still takes CPU from the proxy, the upstream and
the client (the kernel may let a running task finish its slice before a woken one gets the CPU):
ctxscope reached 0.49x of the throughput it has with capture stubbed out (nice 19: 0.56x); in the
idle scheduling class, where any ordinary task that wakes up takes the CPU at once, 0.87x (one
interleaved run of 10 rounds). So on Linux the child runs in the idle class while it keeps up, and
returns to ordinary scheduling at its nice level when it has been behind for MAX_IDLE_LAG seconds
and while it drains on shutdown, so a busy machine cannot starve it. Leaving the idle class needs
root, CAP_SYS_NICE or a RLIMIT_NICE that allows the nice level; a process without that could not
get out again, so it stays at nice 10 only.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import logging
import operator
import os
import queue
import signal
import sqlite3
import threading
import time
from pathlib import Path

from ctxscope.inspector import spool as spools
from ctxscope.inspector.writer import CaptureWriter
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")

STATS_INTERVAL = 0.25
FEED_INTERVAL = 0.01  # while the writer is full: how soon to look again (reading the pipe meanwhile)
CHILD_BACKLOG = 2000  # calls waiting inside the writer before the child stops handing it more
CHILD_BACKLOG_BYTES = 64 << 20  # ... or bytes (the writer would drop calls beyond its own limit)
IDLE_CLASS = True  # use the idle scheduling class where the child may leave it again
MAX_IDLE_LAG = 2.0  # seconds the child may stay behind before it stops yielding to everything
MAX_DEFER = 5.0  # seconds calls may wait in the spool for a pause before they are stored anyway
MAX_DEFER_BYTES = 256 << 20  # ... or body bytes the spool may hold before they are stored anyway


# An Exchange crosses the process boundary (and sits in the spool) as a plain tuple of its fields:
# no class reference and no field names in the pickle, less than half the time to pickle and to unpickle.
_FIELDS = [f.name for f in dataclasses.fields(Exchange)]
pack = operator.attrgetter(*_FIELDS)
_REQUEST_BODY, _RESPONSE_BODY, _ID = (_FIELDS.index(n) for n in ("request_body", "response_body", "id"))


def unpack(fields: tuple) -> Exchange:
    return Exchange(*fields)


def call_size(fields: tuple) -> int:
    """Body bytes of a packed exchange (what the queue and spool limits count)."""
    return len(fields[_REQUEST_BODY]) + len(fields[_RESPONSE_BODY])


def load_factory(spec: str | None):
    """'package.module:function' -> the analyzers that function returns (none for None)."""
    if not spec:
        return []
    module_name, _, attr = spec.partition(":")
    return list(getattr(importlib.import_module(module_name), attr)())


def _can_leave_idle_class() -> bool:
    """Whether this process may return from the idle class at its nice level: tried on a
    throwaway thread (the policy belongs to each thread), so no other thread is left in it."""
    allowed: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            allowed.append(True)
        except (OSError, AttributeError):
            allowed.append(False)

    thread = threading.Thread(target=probe, name="ctxscope-sched-probe")
    thread.start()
    thread.join()
    return allowed == [True]


class _Priority:
    """The child's scheduling: idle class while it keeps up, ordinary (niced) while it is behind."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and hasattr(os, "SCHED_IDLE") and _can_leave_idle_class()
        self.idle = False
        self.behind_since: float | None = None

    def set_idle(self, idle: bool) -> None:
        if idle == self.idle or not self.enabled:
            return
        policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
        for tid in os.listdir("/proc/self/task"):  # every thread; new ones inherit their creator's
            try:
                os.sched_setscheduler(int(tid), policy, os.sched_param(0))
            except ProcessLookupError:  # the thread just ended
                pass
            except OSError as exc:
                if self.enabled:
                    log.warning("capture writer: cannot change its scheduling (%s)", exc)
                self.enabled = False
        self.idle = idle

    def update(self, behind: bool, now: float) -> None:
        if not behind:
            self.behind_since = None
            self.set_idle(True)
        elif self.behind_since is None:
            self.behind_since = now
        elif now - self.behind_since > MAX_IDLE_LAG:
            self.set_idle(False)


class _Deferred:
    """The spool, and the feeding of what it holds to the writer once storing may begin."""

    def __init__(self, spool: spools.Spool, writer: CaptureWriter):
        self.spool, self.writer = spool, writer
        self.received = 0  # calls taken off the pipe (spooled, or stored at once): what the proxy may forget
        self.calls = self.bytes = 0  # spooled, not yet given to the writer
        self.since: float | None = None  # when the oldest of them arrived
        self.given = 0  # calls given to the writer
        self.storing = False  # feeding the writer until the spool has nothing unread
        self._batch: collections.deque[tuple] = collections.deque()  # the rest of the batch being fed
        self._spool_broken = False

    def add(self, batch: list[tuple], now: float, *, received: bool = True) -> None:
        self.received += len(batch) if received else 0
        try:
            self.spool.append(batch)
        except OSError as exc:  # a full disk: store without the spool rather than lose the calls
            if not self._spool_broken:
                log.error("capture writer: cannot write its spool (%s); storing calls as they come", exc)
            self._spool_broken = True
            for fields in batch:
                self._give(fields)
            return
        self.calls += len(batch)
        self.bytes += sum(call_size(f) for f in batch)
        if self.since is None:
            self.since = now

    def due(self, now: float) -> bool:
        """Unbroken traffic may not keep calls unstored forever, nor let the spool grow without end."""
        return self.since is not None and (now - self.since >= MAX_DEFER or self.bytes >= MAX_DEFER_BYTES)

    def feed(self) -> bool:
        """Give the writer spooled calls, oldest first, while it has room; True when all are given."""
        while True:
            if not self._batch:
                batch = self.spool.next_batch()
                if batch is None:
                    self.calls = self.bytes = 0
                    self.since, self.storing = None, False
                    return True
                self._batch.extend(batch)
            s = self.writer.stats()
            if s.queued >= CHILD_BACKLOG or s.queued_bytes >= CHILD_BACKLOG_BYTES:
                return False
            for _ in range(min(len(self._batch), CHILD_BACKLOG - s.queued)):
                fields = self._batch.popleft()
                self.calls -= 1
                self.bytes -= call_size(fields)
                self._give(fields)

    def drain(self) -> None:
        """Feed everything, waiting for the writer as needed (shutting down)."""
        while not self.feed():
            if not self.writer.stats().running:  # nothing will take them: they stay in the spool
                return
            time.sleep(0.01)

    def behind(self) -> bool:
        return self.storing or self.writer.stats().queued > 0

    def settle(self) -> None:
        """Empty the spool once the writer has finished with everything it was given."""
        if self.spool.size and not self.spool.unread and not self._batch:
            s = self.writer.stats()
            if s.written + s.failed + s.dropped >= self.given:
                self.spool.clear()

    def stats(self) -> dict:
        stats = dataclasses.asdict(self.writer.stats())
        stats["queued"] += self.calls
        stats["queued_bytes"] += self.bytes
        return stats

    def _give(self, fields: tuple) -> None:
        self.writer.submit(unpack(fields))
        self.given += 1




def _take_over(db_path: Path, left: list[spools.Orphan], deferred: _Deferred) -> list[str]:
    """Take over the spools of writers that died before storing them (skipping calls they stored):
    their calls go into our spool first, then their files go. Returns the ids of all their calls."""
    ids: list[str] = []
    for orphan in left:
        calls = [fields for batch in orphan.batches for fields in batch]
        theirs = [fields[_ID] for fields in calls]
        ids += theirs
        stored = _stored_ids(db_path, theirs)
        fresh = [fields for fields in calls if fields[_ID] not in stored]
        if fresh:
            deferred.add(fresh, time.monotonic(), received=False)
        if orphan.path != deferred.spool.path:  # one under our own (reused) pid was released already
            orphan.release()
        log.warning("capture writer: %d calls recovered from %s (left by a writer that was killed; %d were "
                    "already stored)", len(fresh), orphan.path.name, len(calls) - len(fresh))
    return ids


def _stored_ids(db_path: Path, ids: list[str]) -> set[str]:
    conn = sqlite3.connect(db_path)
    try:
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = conn.execute(f"SELECT id FROM calls WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
            found.update(r[0] for r in rows)
        return found
    finally:
        conn.close()


def child_main(db_path, factory, nice, batch_interval, inbox, replies, idle_class=True, quiet_after=1.0) -> None:
    """The child's whole life; ``quiet_after``: silence that means the proxy holds no calls."""
    # Ctrl-C and a closed terminal's SIGHUP reach the whole process group; the parent decides when we stop.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        os.nice(nice)
    except OSError:
        pass
    try:
        writer = CaptureWriter(db_path, analyzers=load_factory(factory), batch_interval=batch_interval)
        writer.start()
        spool, left = spools.open_spool(Path(db_path))
    except BaseException as e:  # report, do not hang the parent
        replies.put(("error", f"{type(e).__name__}: {e}"))
        return
    priority = _Priority(idle_class)
    priority.set_idle(True)
    replies.put(("ready", writer.capture_epoch))
    parent = os.getppid()
    deferred = _Deferred(spool, writer)
    replies.put(("recovered", _take_over(Path(db_path), left, deferred)))
    deferred.storing = deferred.calls > 0
    last_stats, sent, last_batch = 0.0, None, time.monotonic()

    while True:
        fed = deferred.feed() if deferred.storing else True
        try:
            item = inbox.get(timeout=STATS_INTERVAL if fed else FEED_INTERVAL)
        except queue.Empty:
            item = ...
        except (EOFError, OSError):
            break
        if item is None:
            break
        now = time.monotonic()
        pause = now - last_batch >= quiet_after
        if item is not ...:
            pause, batch = item
            deferred.add(batch, now)
            last_batch = now
            if not pause:
                deferred.storing = False  # traffic again: only spool (the writer finishes what it has)
        if deferred.calls and (pause or deferred.due(now)):
            deferred.storing = True
        priority.update(deferred.behind(), now)
        deferred.settle()
        if now - last_stats >= STATS_INTERVAL or item is not ...:
            stats = deferred.stats()
            if (stats, deferred.received) != sent:  # an idle child sends nothing: the parent may not read for hours
                replies.put(("stats", stats, deferred.received))
                sent = (stats, deferred.received)
            last_stats = now
        if item is ... and os.getppid() != parent:
            break  # the parent was killed: store what we received, then go
    priority.set_idle(False)  # draining is all that is left to do: do not wait for an idle CPU
    deferred.drain()
    drained = writer.stop()
    deferred.settle()
    spool.close(remove=drained and spool.size == 0)
    replies.put(("stats", deferred.stats(), deferred.received))
