"""The child's spool, and the feeding of what it holds to the writer once storing may begin.

Calls leave the spool only once the writer has committed them (or given them up); while the store
is unavailable the writer takes no more than CHILD_BACKLOG, and the rest waits in the spool. Spools
that killed writers left are taken over first (``take_over``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time

from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.body_delta import ReceivedBodies
from ctxscope.inspector.writer.wire.call_fields import ID, call_size, unpack
from ctxscope.inspector.writer.wire.messages import HandoverRecord
from ctxscope.inspector.writer.wire.spool import SPOOL_LIMIT
from ctxscope.inspector.writer.wire.spool_format import decode
from ctxscope.inspector.writer.wire.spool_room import SpoolRoom

log = logging.getLogger("ctxscope.store")

CHILD_BACKLOG = 600  # calls waiting inside the writer before the child stops handing it more (a batch and some)
CHILD_BACKLOG_BYTES = 64 << 20  # ... or bytes (the writer would drop calls beyond its own limit)
MAX_DEFER = 5.0  # seconds calls may wait in the spool for a pause before they are stored anyway
MAX_DEFER_BYTES = 256 << 20  # ... or body bytes the spool may hold before they are stored anyway
MEMORY_LIMIT = 256 << 20  # body bytes held in memory while the spool cannot be written
KEEP_STORED = 32 << 20  # a spool this large is emptied once stored, not kept for the new bytes of the next calls
SPOOL_RETRY = 5.0  # seconds between attempts to create a spool that could not be created


class Deferred:
    """The spool, and the feeding of what it holds to the writer once storing may begin.

    Calls leave the spool only once the writer has committed them (or given them up): when
    everything appended has been stored, the file is marked so (and kept for the next calls' new
    bytes), or emptied (docs/architecture.md, "New bytes only"). While the store is unavailable the
    writer takes no more than CHILD_BACKLOG, so the rest waits in the spool, however long that
    takes. When the spool itself cannot be written (a full disk), calls are held in memory, up
    to MEMORY_LIMIT bytes; calls beyond that are dropped and counted.
    """

    def __init__(
        self,
        spool: spools.Spool | None,
        writer: CaptureWriter,
        limit: int = SPOOL_LIMIT,
        *,
        quarantined: int = 0,
        room: SpoolRoom | None = None,
    ):
        self.spool, self.writer = spool, writer
        self.limit = limit  # unstored bytes the spool may hold at most (docs/architecture.md, "A bounded spool")
        self.db_path = writer.db_path
        self.room = room or SpoolRoom(self.db_path.parent, cap=limit)  # ... and its disk's room
        self.over_limit = 0  # calls dropped because the spool was full (its disk, or its cap)
        self.received = 0  # calls taken off the pipe (spooled, or held): what the proxy may forget
        self.calls = self.bytes = 0  # spooled, not yet given to the writer
        self.since: float | None = None  # when the oldest of them arrived
        self.given = 0  # calls given to the writer
        self.storing = False  # feeding the writer until the spool has nothing unread
        self.dropped = 0  # calls lost: the spool could not take them and memory was full
        self.spool_failures = 0
        self.quarantined = quarantined  # spool files of dead writers renamed aside as unsafe to read
        self.torn = 0
        self._batch: collections.deque[tuple] = collections.deque()  # the rest of the batch being fed
        self._memory: collections.deque[tuple] = collections.deque()  # calls the spool could not take
        self._memory_bytes = 0
        self._memory_ids: set[str] = set()  # given to the writer from memory, maybe not stored yet
        self._spool_broken = False
        self._disk_full = False  # the last calls held in memory were so for want of room on the disk
        self._reopen_at = 0.0
        self.bodies = ReceivedBodies()  # the large request bodies the proxy may send the new bytes of

    def add_record(self, record: HandoverRecord, now: float) -> None:
        """Spool a hand-over as the proxy encoded it, its payload appended as it is. Only near the
        spool's limit, or when the spool cannot be written, are its calls decoded, to be taken
        one by one (as ``add``)."""
        self.received += record.calls
        if not record.calls:
            return
        incoming = self.bodies.take(record.payload, record.large)  # every hand-over: the numbering must not skip
        spool = self.spool if self._spool_usable(now) else None
        if spool is not None and self.room.fits(len(record.payload), spool.unstored_size, now):
            before = spool.size
            try:
                spool.append_incoming(incoming)
            except OSError as exc:
                self._spool_failed(exc)
                self._hold(decode(incoming.plain()))
            else:
                self.room.took(spool.size - before)
                self.room.written()
                self._spooled(record.calls, record.body_bytes, now)
            return
        self.add(decode(incoming.plain()), now, received=False)

    def add(self, batch: list[tuple], now: float, *, received: bool = True) -> bool:
        """Spool a batch (or hold it in memory if the spool cannot take it); True if all spooled."""
        self.received += len(batch) if received else 0
        spool = self.spool if self._spool_usable(now) else None
        if spool is not None:
            batch, no_room = self._within_limit(spool, batch, now)
            self.room.written()  # the append follows at once, before the disk is asked again
            if no_room:
                self._hold(no_room, disk_full=True)
            if not batch:
                return not no_room
            try:
                spool.append(batch)
            except OSError as exc:
                self._spool_failed(exc)
            else:
                self._spooled(len(batch), sum(call_size(f) for f in batch), now)
                return not no_room
        self._hold(batch)
        return False

    def _spooled(self, calls: int, size: int, now: float) -> None:
        if self._spool_broken:
            log.warning("capture writer: its spool can be written again")
            self._spool_broken = False
        self.calls += calls
        self.bytes += size
        if self.since is None:
            self.since = now

    def _hold(self, batch: list[tuple], *, disk_full: bool = False) -> None:
        """Keep calls the spool could not take in memory, up to MEMORY_LIMIT; the rest are dropped
        (``disk_full``: the spool's disk had no room above its reserve; they count as dropped for a
        full spool too)."""
        if disk_full and not self._disk_full:
            log.error(
                "capture writer: the disk holding its spool is full (%d MB free, less than its reserve); "
                "calls wait in memory (up to %d MB) until they are stored",
                self.room.free >> 20,
                MEMORY_LIMIT >> 20,
            )
        self._disk_full = disk_full
        for fields in batch:
            size = call_size(fields)
            if self._memory and self._memory_bytes + size > MEMORY_LIMIT:
                self.dropped += 1
                self.over_limit += disk_full
                why = "the disk holding the spool is full" if disk_full else "the spool could not be written"
                self.writer.count_dropped(1, why + " and memory was full")
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.error(
                        "capture writer: call %s dropped: %s and %d MB of calls wait in memory already "
                        "(%d dropped so far)",
                        fields[ID],
                        why,
                        MEMORY_LIMIT >> 20,
                        self.dropped,
                    )
                continue
            self._memory.append(fields)
            self._memory_bytes += size
        self.storing = True

    def _within_limit(self, spool: spools.Spool, batch: list[tuple], now: float) -> tuple[list[tuple], list[tuple]]:
        """The calls of a batch the spool takes, and those its disk has no room for (above the
        reserve: they wait in memory). Calls past the cap (``max_spool_bytes``) are dropped,
        counted and shown (``dropped_spool_full``)."""
        size = spool.unstored_size
        kept: list[tuple] = []
        no_room: list[tuple] = []
        for fields in batch:
            need = call_size(fields)
            if self.room.cap is not None and size + need > self.room.cap:
                self.dropped += 1
                self.writer.count_dropped(1, "the spool reached max_spool_bytes")
                self.over_limit += 1
                if self.over_limit == 1 or self.over_limit % 1000 == 0:
                    log.error(
                        "capture writer: call %s dropped: the spool reached max_spool_bytes (it holds %d MB not "
                        "stored); %d calls dropped so far while it was full",
                        fields[ID],
                        size >> 20,
                        self.over_limit,
                    )
                continue
            if not self.room.fits(need, size, now):
                no_room.append(fields)
                continue
            kept.append(fields)
            size += need
            self.room.took(need)
        return kept, no_room

    def _spool_usable(self, now: float) -> bool:
        if self.spool is None and now >= self._reopen_at:
            try:
                self.spool = spools.Spool(self.db_path)
                log.warning("capture writer: its spool %s could be created now", self.spool.path.name)
            except OSError as exc:
                self._reopen_at = now + SPOOL_RETRY
                self._spool_failed(exc)
        return self.spool is not None

    def _spool_failed(self, exc: OSError) -> None:
        self.spool_failures += 1
        if not self._spool_broken:
            log.error(
                "capture writer: cannot write its spool (%s); calls wait in memory (up to %d MB) until they are stored",
                exc,
                MEMORY_LIMIT >> 20,
            )
        self._spool_broken = True

    def start_storing(self) -> None:
        """Feed the writer until the spool has nothing unread (the traffic paused, or calls are due)."""
        self.storing = True

    def only_spool(self) -> None:
        """Traffic again: spool what comes, feed the writer nothing more (it finishes what it has)."""
        self.storing = False

    def took_over(self, torn: int, quarantined: bool) -> None:
        """A dead writer's spool was copied into this one: its torn records, and whether it was set aside."""
        self.torn += torn
        self.quarantined += quarantined

    def due(self, now: float) -> bool:
        """Unbroken traffic may not keep calls unstored forever, nor let the spool grow without end;
        calls held in memory are stored as soon as possible."""
        if self._memory:
            return True
        full = self.bytes >= min(MAX_DEFER_BYTES, self.limit // 2)
        return self.since is not None and (now - self.since >= MAX_DEFER or full)

    def pending(self) -> bool:
        return self.calls > 0 or bool(self._memory)

    def feed(self) -> bool:
        """Give the writer held and spooled calls, oldest first, while it has room; True when all are given.

        Room is counted per call, in calls and in bytes, so the writer never has to drop one: a
        call that would take it past CHILD_BACKLOG_BYTES waits until it is empty."""
        s = self.writer.stats()
        room, queued_bytes = CHILD_BACKLOG - s.queued, s.queued_bytes
        while True:
            fields = self._next()
            if fields is None:
                self.calls = self.bytes = 0
                self.since, self.storing = None, False
                return True
            size = call_size(fields)
            if room <= 0 or (queued_bytes and queued_bytes + size > CHILD_BACKLOG_BYTES):
                return False
            if self._memory:
                self._memory.popleft()
                self._memory_bytes -= size
                self._memory_ids.add(fields[ID])
            else:
                self._batch.popleft()
                self.calls -= 1
                self.bytes -= size
            self._give(fields)
            room, queued_bytes = room - 1, queued_bytes + size

    def _next(self) -> tuple | None:
        """The next call to give the writer (held in memory first, then spooled), not taken yet."""
        if self._memory:
            return self._memory[0]
        while not self._batch:
            batch = self.spool.next_batch() if self.spool is not None else None
            if batch is None:
                return None
            self._batch.extend(batch)
        return self._batch[0]

    def drain(self) -> None:
        """Feed everything, waiting for the writer as needed (shutting down). Gives up while the
        store is unavailable: spooled calls then stay in the spool for the next writer."""
        while not self.feed():
            s = self.writer.stats()
            if not s.running or s.store_down_since is not None:
                return
            time.sleep(0.01)

    def backlog_bytes(self) -> int:
        """Bytes received and not stored yet: spooled, held in memory or queued in the writer."""
        return self.bytes + self._memory_bytes + self.writer.stats().queued_bytes

    def behind(self) -> bool:
        return self.storing or self.writer.stats().queued > 0

    def settle(self, *, empty: bool = False) -> None:
        """Once the writer has committed (or given up) everything it was given, mark the spool's
        records stored, keeping them, so the next large bodies may be spooled as the new bytes they
        add to them; empty it instead once it holds KEEP_STORED (or an eighth of its limit), or when
        ``empty`` (the child is idle, or stops)."""
        s = self.writer.stats()
        if s.written + s.failed + s.dropped + s.already_stored < self.given:
            return
        self._memory_ids.clear()
        spool = self.spool
        if spool is None or spool.unread or self._batch:
            return
        if empty or spool.size >= min(KEEP_STORED, self.limit // 8):
            spool.clear()
        elif spool.holds:
            try:
                spool.mark_stored()
            except OSError:  # a full disk: emptying it needs no space
                spool.clear()

    def settled(self) -> bool:
        """Nothing held, spooled, being stored or failing: the child may sleep until the proxy sends
        something (docs/architecture.md, "A quiet idle daemon")."""
        if self.storing or self.pending() or self.writer.store_down:
            return False
        s = self.writer.stats()
        return s.queued == 0 and s.written + s.failed + s.dropped + s.already_stored >= self.given

    def lost_at_stop(self) -> int:
        """Calls held in memory (the spool could not take them) that were not stored: lost now, and
        counted as dropped."""
        unstored = sum(1 for ex in list(self.writer._pending) if ex.id in self._memory_ids)
        lost = len(self._memory) + unstored
        self.dropped += lost
        return lost

    def stats(self) -> dict:
        stats = dataclasses.asdict(self.writer.stats())
        stats["queued"] += self.calls + len(self._memory)
        stats["queued_bytes"] += self.bytes + self._memory_bytes
        stats["dropped"] += self.dropped
        stats["spool_failures"] = self.spool_failures
        stats["dropped_spool_full"] = self.over_limit
        stats["spools_quarantined"] = self.quarantined
        stats["spool_records_torn"] = self.torn
        stats["in_memory"] = len(self._memory)
        return stats

    def _give(self, fields: tuple) -> None:
        self.writer.submit(unpack(fields))
        self.given += 1


def take_over(left: list[spools.Orphan], deferred: Deferred) -> list[str]:
    """Take over the spools of writers that died before storing them: their calls go into our
    spool first, then their files go (a corrupt one is quarantined, after its good records). The
    writer skips calls they had already stored. Returns the ids of all the calls taken over."""
    ids: list[str] = []
    for orphan in left:
        n, kept = 0, True
        for batch in orphan.batches():
            ids += [fields[ID] for fields in batch]
            n += len(batch)
            if not deferred.add(batch, time.monotonic(), received=False):
                kept = False  # our spool cannot take them: leave the file for the next writer
                break
        if not kept:
            deferred.took_over(orphan.torn, quarantined=False)
            orphan.keep()
            log.error(
                "capture writer: could not copy %s into its own spool; left it for the next writer", orphan.path.name
            )
            continue
        deferred.took_over(orphan.torn, quarantined=orphan.release() is not None)
        log.warning(
            "capture writer: %d calls recovered from %s (left by a writer that was killed; the writer skips "
            "any it had stored already)",
            n,
            orphan.path.name,
        )
    return ids
