"""The spool: calls handed over during a burst wait there, safe from kills, until the traffic pauses."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.wire import call_fields, spool_format
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.call_fields import pack as _pack
from ctxscope.inspector.writer.wire.call_fields import unpack

from support.factories import make_exchange


def _calls(*numbers: int) -> list[tuple]:
    return [_pack(make_exchange(n)) for n in numbers]


def test_batches_come_back_in_order_once_and_clear_empties_the_file(tmp_path):
    s = spools.Spool(tmp_path / "c.db")
    a, bc, d = _calls(1), _calls(2, 3), _calls(4)
    try:
        assert s.path.read_bytes() == spools.HEADER and os.stat(s.path).st_mode & 0o777 == 0o600
        s.append(a)
        s.append(bc)
        assert s.unread and s.next_batch() == a and s.next_batch() == bc
        assert not s.unread and s.next_batch() is None
        s.append(d)
        assert s.next_batch() == d and s.next_batch() is None
        s.clear()
        assert s.path.read_bytes() == spools.HEADER and not s.unread and not s.holds
    finally:
        s.close(remove=True)
    assert not s.path.exists()


def test_every_field_survives_the_round_trip_and_bodies_are_stored_raw(tmp_path):
    ex = make_exchange(
        7,
        request_body=bytes(range(256)) * 4,
        annotations=(("x-ctxscope-tag", "t\udcff"),),
        first_byte_at=None,
        status=None,
        extra={"proxy_error_body": "{}"},
        error="boom",
        client="ua",
    )
    [back] = spool_format.decode(b"".join(spool_format.encode([_pack(ex)]))[12:])
    assert unpack(back) == ex
    record = b"".join(spool_format.encode([_pack(ex)]))
    assert bytes(range(256)) * 4 in record  # the body as sent: no base64, no pickle


def test_times_are_written_as_their_bytes_in_hex_and_read_back_as_the_same_floats():
    """Version 4 writes a time as the hex of its 8 bytes, not as a decimal (whose shortest form
    cost the feeder most of a small call); it reads back bit for bit, and a time that is no
    float (None, or an int from a caller) is written as it is."""
    import dataclasses
    import json
    import struct

    ex = make_exchange(3, started_at=1796210516.4069738, first_byte_at=None, ended_at=1796210516.4210358)
    odd = make_exchange(4, started_at=1_750_000_000, first_byte_at=0.1 + 0.2)
    record = b"".join(spool_format.encode([_pack(ex), _pack(odd)]))[12:]
    (n,) = struct.unpack_from("<I", record)
    head, other = json.loads(record[4 : 4 + n])
    names = [f.name for f in dataclasses.fields(type(ex))]
    assert head[names.index("started_at")] == struct.pack("<d", 1796210516.4069738).hex()
    assert head[names.index("first_byte_at")] is None and other[names.index("started_at")] == 1_750_000_000
    back, back_odd = (unpack(fields) for fields in spool_format.decode(record))
    assert back == ex and back.started_at.hex() == ex.started_at.hex() and back_odd.first_byte_at == 0.1 + 0.2
    assert type(back_odd.started_at) is float  # read as every time is, as before


def test_a_record_of_version_3_with_its_times_as_numbers_still_reads():
    import dataclasses
    import json
    import struct

    ex = make_exchange(5, started_at=1796210516.4069738, first_byte_at=1796210516.5, ended_at=1796210517.25)
    record = b"".join(spool_format.encode([_pack(ex)]))[12:]
    (n,) = struct.unpack_from("<I", record)
    heads = json.loads(record[4 : 4 + n])
    names = [f.name for f in dataclasses.fields(type(ex))]
    for name in ("started_at", "first_byte_at", "ended_at"):  # as version 3 wrote them: numbers
        heads[0][names.index(name)] = getattr(ex, name)
    text = json.dumps(heads).encode()
    assert b"1796210516.4069738" in text
    [back] = spool_format.decode(struct.pack("<I", len(text)) + text + record[4 + n :])
    assert unpack(back) == ex
    assert spool_format.MAGIC + bytes([3]) in spool_format.READABLE


def test_a_small_record_reads_back_in_one_read_and_a_large_one_still_whole(tmp_path, monkeypatch):
    """A record that fits the first read comes back from it alone, checked or not; one past it is
    read piece by piece as before. A changed byte in a small record fails its checksum."""
    small, large = _calls(1), [_pack(make_exchange(2, request_body=b"x" * (spool_format._ONE_READ + 1)))]
    s = spools.Spool(tmp_path / "c.db")
    try:
        s.append(small)
        s.append(large)
        reads: list[int] = []
        real_pread = os.pread
        monkeypatch.setattr(spool_format.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
        for verify in (False, True):
            reads.clear()
            batch, after = spool_format.read_record(s._fd, len(spools.HEADER), s.size, verify=verify)
            assert batch == small and len(reads) == 1
            reads.clear()
            batch, end = spool_format.read_record(s._fd, after, s.size, verify=verify)
            assert batch == large and end == s.size and len(reads) > 1
        monkeypatch.undo()
        with open(s.path, "r+b") as f:
            f.seek(after - 3)
            last = f.read(1)
            f.seek(after - 3)
            f.write(bytes([last[0] ^ 1]))
        with pytest.raises(spool_format.SpoolCorrupt, match="checksum"):
            spool_format.read_record(s._fd, len(spools.HEADER), s.size)
    finally:
        s.close(remove=True)


def test_a_failed_append_leaves_the_spool_as_it_was(tmp_path, monkeypatch):
    s = spools.Spool(tmp_path / "c.db")
    first, third = _calls(1), _calls(3)
    try:
        s.append(first)
        size = s.size

        def half_then_full(fd, views):
            os.write(fd, bytes(views[0][:5]))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(spools.os, "writev", half_then_full)
        try:
            s.append(_calls(2))
        except OSError:
            pass
        else:
            raise AssertionError("append should fail")
        monkeypatch.undo()
        assert s.path.stat().st_size == size == s.size  # no half record left behind
        s.append(third)
        assert s.next_batch() == first and s.next_batch() == third and s.corrupt == 0
    finally:
        s.close(remove=True)


def test_only_the_spools_of_dead_writers_are_orphans_and_a_torn_record_is_dropped(tmp_path):
    db = tmp_path / "c.db"
    alive = spools.Spool(db)  # this process holds its lock
    dead = spools.Spool(db, owner=999_999)
    x, y = _calls(1), _calls(2)
    dead.append(x)
    dead.append(y)
    dead.close(remove=False)  # the lock goes with the closed file, as with a killed process
    with open(dead.path, "ab") as f:
        f.write(b"".join(spool_format.encode(_calls(3)))[:40])  # a record cut short by the kill
    try:
        found = spools.orphans(db)
        assert [o.path.name for o in found] == [dead.path.name]
        assert list(found[0].batches()) == [x, y] and found[0].torn == 1 and found[0].corrupt is None
        assert spools.orphans(db) == []  # taken over: a second new writer does not get it too
        assert found[0].release() is None  # a torn end is normal: removed, not quarantined
        assert not dead.path.exists() and spools.orphans(db) == []
    finally:
        alive.close(remove=True)


def test_a_new_spool_never_reuses_or_follows_an_existing_file(tmp_path):
    db = tmp_path / "c.db"
    old = spools.Spool(db, owner=424_242)  # left by a writer whose pid is ours now
    old.append(_calls(1))
    old.close(remove=False)
    target = tmp_path / "elsewhere"
    os.symlink(target, spools.spool_path(db, "424242.1"))  # planted where the next name would be
    mine = spools.Spool(db, owner=424_242)
    try:
        assert mine.path.name == "c.db.spool-424242.2"
        assert not target.exists()
        quarantined: list = []
        [left] = spools.orphans(db, quarantined)
        assert left.path == old.path and len(list(left.batches())) == 1
        left.release()
        assert [p.name.split(".quarantined-")[0] for p in quarantined] == ["c.db.spool-424242.1"]
        assert quarantined[0].is_symlink() and not target.exists()
    finally:
        mine.close(remove=True)


@pytest.mark.slow
def test_a_new_writer_stores_an_orphaned_spool_once_skipping_calls_already_stored(tmp_path):
    db = tmp_path / "c.db"
    first = WriterProcess(db)
    first.start()
    already = make_exchange(0)
    first.submit(already)
    assert first.stop()
    left = spools.Spool(db, owner=999_998)  # a writer killed after storing call 0 but before clearing
    left.append([_pack(already), _pack(make_exchange(1))])
    left.append([_pack(make_exchange(2))])
    left.close(remove=False)

    second = WriterProcess(db)
    second.start()
    assert second.stop()
    ids = [r["id"] for r in list_calls(open_db(db), limit=None)]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert not list(tmp_path.glob("c.db.spool-*"))


def test_records_marked_stored_are_kept_but_neither_waiting_nor_taken_over(tmp_path):
    """A writer keeps its stored records after a pause (marked, not emptied): ``db status`` counts
    only what follows the last mark, and a writer taking the file over after a crash stores only
    that, never reading the calls before the mark (not in the store here: they would show up)."""
    db = tmp_path / "c.db"
    left = spools.Spool(db, owner=999_995)
    left.append(_calls(1, 2))
    left.mark_stored()
    left.append(_calls(3))
    left.mark_stored()
    assert not left.holds and spools.spool_status(db)["bytes"] == 0
    after = left.size
    later = _calls(4, 5)
    left.append(later)
    assert left.holds and spools.spool_status(db)["bytes"] == left.size - after
    left.close(remove=False)
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    assert sorted(r["id"] for r in list_calls(open_db(db), limit=None)) == sorted(f[call_fields.ID] for f in later)
    assert not list(tmp_path.glob("c.db.spool-*"))


def test_a_file_of_many_tiny_records_is_scanned_for_marks_only_so_far(tmp_path, monkeypatch):
    """``db status`` reads record headers looking for the last mark, and stops after _MAX_SCAN of
    them: what follows counts as waiting (read again, never skipped)."""
    monkeypatch.setattr(spool_format, "_MAX_SCAN", 3)
    s = spools.Spool(tmp_path / "c.db")
    try:
        s.append(_calls(1))
        s.mark_stored()
        first_mark = s.size
        s.append(_calls(2))
        s.mark_stored()
        assert spool_format.stored_up_to(s._fd, s.size) == first_mark
        s.append(_calls(3))
        cut = s.size
        with open(s.path, "ab") as f:
            f.write(spool_format.STORED_MARK[:5])  # a mark torn by a crash marks nothing
        assert spool_format.stored_up_to(s._fd, cut + 5) == first_mark
    finally:
        s.close(remove=True)


@pytest.mark.slow
async def test_calls_handed_over_during_a_burst_are_spooled_not_stored_until_the_pause(tmp_path, quiet_gap):
    db = tmp_path / "b.db"
    w = WriterProcess(db, idle_release=2.0)
    w.start()
    try:
        spool_file = next(tmp_path.glob("b.db.spool-*"))
        began, i = time.monotonic(), 0
        while time.monotonic() - began < 1.0:  # past MAX_HOLD: one hand-over without a pause
            w.submit(make_exchange(i))
            i += 1
            await asyncio.sleep(quiet_gap / 5)
        spooled = spool_file.stat().st_size
        stored = len(list_calls(open_db(db), limit=None))
        assert spooled > 0 and stored == 0  # the burst goes on: nothing stored beside it
        assert w.stats().queued == i  # but counted as waiting (proxy + spool)
        deadline = time.monotonic() + 20
        while len(list_calls(open_db(db), limit=None)) < i and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the pause: everything is stored
        assert len(list_calls(open_db(db), limit=None)) == i
        while not spool_file.read_bytes().endswith(spool_format.STORED_MARK) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # kept, marked stored (the next calls' large bodies may be spooled as their new bytes): nothing waits
        assert spool_file.stat().st_size > len(spools.HEADER) + len(spool_format.STORED_MARK)
        assert db_status(db)["spool"]["bytes"] == 0
        while os.path.getsize(spool_file) > len(spools.HEADER) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # idle for idle_release: emptied
        assert spool_file.read_bytes() == spools.HEADER
    finally:
        assert w.stop()
    assert not spool_file.exists()


def test_db_status_tells_spooled_bytes_and_spools_left_by_stopped_writers(tmp_path):

    db = tmp_path / "c.db"
    first = WriterProcess(db)
    first.start()
    assert first.stop()
    assert db_status(db)["spool"] == {"files": 0, "bytes": 0, "left_by_stopped_writers": 0, "quarantined": []}
    live = spools.Spool(db)  # a running writer's spool
    live.append([_pack(make_exchange(1))])
    left = spools.Spool(db, owner=999_997)
    left.append([_pack(make_exchange(2))])
    left.close(remove=False)
    try:
        st = db_status(db)["spool"]
        header = 2 * len(spools.HEADER)
        assert st["files"] == 2 and st["bytes"] == live.size + left.size - header and st["left_by_stopped_writers"] == 1
    finally:
        live.close(remove=True)


def slow_analyzer():
    """An analyzer factory the child imports by name: storing takes a while."""

    def analyzer(db, call):
        time.sleep(0.05)

    return [analyzer]


@pytest.mark.slow
def test_a_writer_that_cannot_finish_in_time_is_stopped_and_its_spool_stored_by_the_next(tmp_path, caplog):
    db = tmp_path / "s.db"
    w = WriterProcess(db, analyzers_factory="test_inspector_spool:slow_analyzer")
    w.start()
    for i in range(100):  # about 5 s of storing
        w.submit(make_exchange(i))
    assert w.stop(timeout=1.0) is False
    assert "stay in its spool" in caplog.text
    assert list(tmp_path.glob("s.db.spool-*"))
    stored_before = len(list_calls(open_db(db), limit=None))
    assert stored_before < 100
    nxt = WriterProcess(db)
    nxt.start()
    assert nxt.stop()
    ids = [r["id"] for r in list_calls(open_db(db), limit=None)]
    assert len(ids) == len(set(ids)) == 100
    assert not list(tmp_path.glob("s.db.spool-*"))
