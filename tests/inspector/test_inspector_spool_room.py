"""The spool's bound follows its disk's free space, less a reserve (docs/architecture.md, "A bounded spool")."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.inspector.writer.wire.call_fields import ID, call_size, pack
from ctxscope.inspector.writer.wire.spool import Spool
from ctxscope.inspector.writer.wire.spool_room import RESERVE, SpoolRoom

from support.factories import make_exchange

GiB = 1 << 30


class FakeDisk:
    """A file system of ``size`` bytes with ``free`` of them free, as ``statvfs`` reports it, less
    what the files in ``on_it`` hold (a spool's appends take the disk's room)."""

    def __init__(self, size: int, free: int):
        self.size, self.free, self.asked = size, free, 0
        self.on_it: list[Path] = []

    def __call__(self, path: Path) -> os.statvfs_result:
        self.asked += 1
        frsize = 4096
        free = self.free - sum(p.stat().st_size for p in self.on_it if p.exists())
        return os.statvfs_result((frsize, frsize, self.size // frsize, free // frsize, free // frsize, 0, 0, 0, 0, 255))


def test_the_room_is_the_free_space_less_the_larger_of_the_reserve_and_five_percent(tmp_path):
    small = FakeDisk(size=10 * GiB, free=3 * GiB)  # 5% is 0.5 GiB: the 1 GiB reserve counts
    room = SpoolRoom(tmp_path, statvfs=small)
    assert room.fits(2 * GiB - 4096, 0, now=0.0)
    assert not room.fits(2 * GiB + 4096, 0, now=0.0)
    big = FakeDisk(size=1000 * GiB, free=60 * GiB)  # 5% is 50 GiB: more than the reserve
    room = SpoolRoom(tmp_path, statvfs=big)
    assert room.fits(10 * GiB - 4096, 0, now=0.0) and not room.fits(10 * GiB + 4096, 0, now=0.0)
    assert GiB == RESERVE


def test_the_room_shrinks_as_the_spool_grows_and_follows_the_disk_when_asked_again(tmp_path):
    disk = FakeDisk(size=100 * GiB, free=5 * GiB + (64 << 20))  # 64 MiB above the 5 GiB reserve
    room = SpoolRoom(tmp_path, statvfs=disk)
    assert room.fits(32 << 20, 0, now=0.0)
    room.took(32 << 20)
    asked = disk.asked
    assert room.fits(32 << 20, 32 << 20, now=0.1) and disk.asked == asked  # a fresh figure: not asked again
    room.took(32 << 20)
    disk.free -= 64 << 20  # the appends really took the disk's room
    assert not room.fits(1 << 20, 64 << 20, now=0.2)  # what it took is counted before the disk is asked
    disk.free += 1 * GiB  # the spool was stored and emptied, or someone freed space
    assert room.fits(1 << 20, 0, now=0.25)  # short of room: the disk is asked again at once, not after RECHECK
    assert disk.asked > asked


def test_a_cap_bounds_the_unstored_bytes_below_the_disks_room(tmp_path):
    room = SpoolRoom(tmp_path, cap=10 << 20, statvfs=FakeDisk(size=100 * GiB, free=50 * GiB))
    assert room.fits(4 << 20, 5 << 20, now=0.0) and not room.fits(6 << 20, 5 << 20, now=0.0)


def test_an_unreadable_disk_leaves_no_room_rather_than_guess(tmp_path):
    def broken(path):
        raise OSError(5, "Input/output error")

    assert not SpoolRoom(tmp_path, statvfs=broken).fits(1, 0, now=0.0)


def test_calls_past_a_full_disk_wait_in_memory_then_are_dropped_counted_and_the_rest_stored(tmp_path, monkeypatch):
    """The disk fills during a burst: the spool takes calls while it has room above the reserve,
    the next wait in memory (bounded), the rest are dropped and counted (``dropped_spool_full``
    and the store's events); when space returns, the spool takes calls again."""
    from ctxscope.inspector.writer.child import deferred as wc

    monkeypatch.setattr(wc, "MEMORY_LIMIT", 5 * 3246)  # five calls of 3 KB
    db = tmp_path / "c.db"
    disk = FakeDisk(size=100 * GiB, free=5 * GiB + 30_000)  # room for about 9 calls of 3 KB
    writer = CaptureWriter(db)
    writer.start()
    d = wc.Deferred(Spool(db), writer, room=SpoolRoom(tmp_path, statvfs=disk))
    assert d.spool is not None
    disk.on_it.append(d.spool.path)
    try:
        batch = [pack(make_exchange(i, request_body=b"a" * 3000)) for i in range(20)]
        assert call_size(batch[0]) == 3246
        assert not d.add(batch, now=0.0)
        kept = d.calls
        assert 7 <= kept <= 9 and d.stats()["in_memory"] == 5
        assert d.stats()["dropped_spool_full"] == d.stats()["dropped"] == 20 - kept - 5
        disk.free += GiB
        later = [pack(make_exchange(i, request_body=b"b" * 3000)) for i in range(20, 25)]
        assert d.add(later, now=1.0)
        assert d.calls == kept + 5 and d.stats()["dropped_spool_full"] == 20 - kept - 5
        d.start_storing()
        d.drain()
        deadline = time.monotonic() + 20
        while writer.stats().written < kept + 10 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        writer.stop()
    conn = open_db(db)
    stored = {r["id"] for r in list_calls(conn, limit=None)}
    assert stored == {f[ID] for f in batch[: kept + 5] + later}
    dropped = conn.execute("select coalesce(sum(count), 0) from store_events where kind = 'dropped'").fetchone()[0]
    assert dropped == 20 - kept - 5
