"""A spool next to the database is read by the next writer: one planted by someone else must not
run code or stop capture. Unsafe spools are quarantined, reported, and never read."""

from __future__ import annotations

import os
import pickle
import struct

import pytest

from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire import spool_format
from ctxscope.inspector.writer.wire.call_fields import pack

from support.environment import require
from support.factories import make_exchange, plant_pickle_spool


def _stored_ids(db) -> list[str]:
    return [r["id"] for r in list_calls(open_db(db), limit=None)]


def test_a_planted_pickle_spool_and_a_garbage_one_run_nothing_and_capture_goes_on(tmp_path):
    db = tmp_path / "c.db"
    marker = tmp_path / "pwned"
    payload = plant_pickle_spool(spools.spool_path(db, 4242), marker)
    garbage = spools.spool_path(db, 4243)
    garbage.write_bytes(os.urandom(5000))
    os.chmod(garbage, 0o600)

    w = WriterProcess(db)
    w.start()
    ex = make_exchange(1)
    w.submit(ex)
    assert w.stop()
    assert not marker.exists()  # nothing in the planted file ran
    assert _stored_ids(db) == [ex.id]  # capture went on
    assert w.stats().spools_quarantined == 2
    status = db_status(db)["spool"]
    assert sorted(n.split(".quarantined-")[0] for n in status["quarantined"]) == ["c.db.spool-4242", garbage.name]
    assert status["files"] == 0  # renamed aside: no writer reads them again
    nxt = WriterProcess(db)
    nxt.start()
    assert nxt.stop() and nxt.stats().spools_quarantined == 0 and not marker.exists()
    pickle.loads(payload)  # the plant was live: unpickled, it does make the folder
    assert marker.is_dir()


def _valid_spool(db, owner: int) -> tuple:
    s = spools.Spool(db, owner=owner)
    ex = make_exchange(owner)
    s.append([pack(ex)])
    s.close(remove=False)
    return s.path, ex


@pytest.mark.parametrize("how", ["another user's", "group-writable", "world-writable", "a symlink"])
def test_a_spool_someone_else_could_have_written_is_never_read(tmp_path, how):
    db = tmp_path / "c.db"
    path, ex = _valid_spool(db, 5151)
    if how == "another user's":
        require(os.geteuid() == 0, "giving a file to another user needs root")
        os.chown(path, 12345, 12345)
    elif how == "group-writable":
        os.chmod(path, 0o620)
    elif how == "world-writable":
        os.chmod(path, 0o602)
    else:
        real = path.with_name("real-spool")
        path.rename(real)
        path.symlink_to(real)
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    assert ex.id not in _stored_ids(db)
    assert w.stats().spools_quarantined == 1
    assert len(db_status(db)["spool"]["quarantined"]) == 1 and not path.exists()


def test_a_corrupt_record_keeps_the_calls_before_it_and_quarantines_the_file(tmp_path, caplog):
    db = tmp_path / "c.db"
    s = spools.Spool(db, owner=6161)
    good, damaged, after = make_exchange(1), make_exchange(2), make_exchange(3)
    s.append([pack(good)])
    at = s.size
    s.append([pack(damaged)])
    s.append([pack(after)])
    s.close(remove=False)
    data = bytearray(s.path.read_bytes())
    data[at + 40] ^= 0xFF  # one flipped byte inside the second record
    s.path.write_bytes(bytes(data))
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    assert _stored_ids(db) == [good.id]
    assert w.stats().spools_quarantined == 1
    [aside] = db_status(db)["spool"]["quarantined"]
    assert aside.startswith("c.db.spool-6161.quarantined-")


def test_a_record_torn_by_a_crash_is_dropped_and_counted_and_the_rest_stored(tmp_path):
    db = tmp_path / "c.db"
    s = spools.Spool(db, owner=7171)
    kept = make_exchange(1)
    s.append([pack(kept)])
    s.close(remove=False)
    with open(s.path, "ab") as f:
        f.write(b"".join(spool_format.encode([pack(make_exchange(2))]))[:-3])  # the crash came mid-append
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    assert _stored_ids(db) == [kept.id]
    st = w.stats()
    assert st.spool_records_torn == 1 and st.spools_quarantined == 0
    assert spools.spool_files(db) == [] and db_status(db)["spool"]["quarantined"] == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("status", "200"),
        ("request_body", -1),
        ("extra", []),
        ("id", None),
        ("started_at", "soon"),
        ("ended_at", "00ff"),
        ("first_byte_at", [1]),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_corrupt(field, value):
    import dataclasses
    import json
    import zlib

    from ctxscope.proxy.exchange import Exchange

    names = [f.name for f in dataclasses.fields(Exchange)]
    record = b"".join(spool_format.encode([pack(make_exchange(1))]))[12:]
    (n,) = struct.unpack_from("<I", record)
    heads = json.loads(record[4 : 4 + n])
    heads[0][names.index(field)] = value
    text = json.dumps(heads).encode()
    forged = struct.pack("<I", len(text)) + text + record[4 + n :]
    assert zlib.crc32(forged)  # a checksum would match: the reader checks more than that
    with pytest.raises(spool_format.SpoolCorrupt):
        spool_format.decode(forged)


def test_a_record_written_before_fields_with_defaults_existed_still_reads():
    import dataclasses
    import json

    from ctxscope.inspector.writer.wire.call_fields import unpack
    from ctxscope.proxy.exchange import Exchange

    optional = sum(
        1
        for f in dataclasses.fields(Exchange)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    )
    ex = make_exchange(1, error=None, client=None)  # the optional fields at their defaults
    record = b"".join(spool_format.encode([pack(ex)]))[12:]
    (n,) = struct.unpack_from("<I", record)
    heads = json.loads(record[4 : 4 + n])
    heads[0] = heads[0][:-optional]  # as an older ctxscope wrote it
    text = json.dumps(heads).encode()
    [back] = spool_format.decode(struct.pack("<I", len(text)) + text + record[4 + n :])
    assert unpack(back) == ex


def test_a_huge_declared_record_length_allocates_nothing_before_its_checksum_fails(tmp_path):
    """A sparse file that declares one 256 MB record: reading it must not hold 256 MB first."""
    import tracemalloc

    db = tmp_path / "c.db"
    path = spools.spool_path(db, 5151)
    size = 256 << 20
    with open(path, "wb") as f:
        f.write(spools.HEADER + struct.pack("<QI", size - len(spools.HEADER) - 12, 12345))
        f.truncate(size)
    os.chmod(path, 0o600)
    [orphan] = spools.orphans(db)
    tracemalloc.start()
    try:
        assert list(orphan.batches()) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert orphan.corrupt and "checksum" in orphan.corrupt
    assert peak < 16 << 20, f"reading held {peak >> 20} MB"
    assert orphan.release() is not None  # quarantined


def test_a_spool_taken_over_by_another_writer_meanwhile_is_left_to_it(tmp_path, monkeypatch):
    """Two writers start together: while one waits for the lock of a planted file, the other
    quarantines it and a live writer's spool gets the same name. The late one must not move the
    live spool aside, nor read a file that is no longer the one at its path."""
    db = tmp_path / "c.db"
    planted = spools.spool_path(db, 5252)
    planted.write_bytes(b"garbage" * 10)
    os.chmod(planted, 0o600)
    real_flock = spools.fcntl.flock
    live = []

    def rival_first(fd, op):
        if not live:
            live.append(None)
            spools.quarantine(planted, "a rival writer found it unsafe")
            live[0] = spools.Spool(db, owner=5252)  # a live writer's spool under the same name
        return real_flock(fd, op)

    monkeypatch.setattr(spools.fcntl, "flock", rival_first)
    quarantined: list = []
    found = spools.orphans(db, quarantined)
    monkeypatch.undo()
    try:
        assert found == [] and quarantined == []
        assert live[0].path == planted and planted.exists()  # the live spool stays where it is
        assert len(spools.quarantined_files(db)) == 1  # the rival's quarantine only
    finally:
        live[0].close(remove=True)


def test_a_valid_spool_taken_over_and_released_meanwhile_is_not_read_again(tmp_path, monkeypatch):
    db = tmp_path / "c.db"
    s = spools.Spool(db, owner=5353)
    s.append([pack(make_exchange(1))])
    s.close(remove=False)
    real_flock = spools.fcntl.flock
    done = []

    def rival_first(fd, op):
        if not done:
            done.append(True)
            [theirs] = spools.orphans(db)
            assert len(list(theirs.batches())) == 1
            theirs.release()  # stored by the rival: the file is gone
        return real_flock(fd, op)

    monkeypatch.setattr(spools.fcntl, "flock", rival_first)
    found = spools.orphans(db)
    monkeypatch.undo()
    for orphan in found:
        orphan.keep()
    assert found == []
