"""The capture store's connection: WAL, synchronous=NORMAL, migrations, meta and events."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from ctxscope.inspector.base.clock import iso
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.migrations import migrations

# -- tests ----------------------------------------------------------------------------------


def test_connect_creates_schema_in_wal_with_synchronous_normal(tmp_path):
    db = store.connect(tmp_path / "sub" / "c.db")
    assert db.journal_mode == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert {"calls", "blobs", "meta", "store_events"} <= set(db.table_names())
    assert store.applied_migrations(db) == [m.name for m in migrations._migrations]
    assert all(m.name.startswith(("m0", "m1")) and m.name[1:4].isdigit() for m in migrations._migrations)
    assert [m.name for m in migrations._migrations] == sorted(m.name for m in migrations._migrations)
    indexes = {i.name for i in db["calls"].indexes}
    assert {"idx_calls_session_seq", "idx_calls_started_at", "idx_calls_model"} <= indexes
    assert "idx_calls_request" not in indexes  # the time index carries the hash (m017)
    [by_time] = [i for i in db["calls"].indexes if i.name == "idx_calls_started_at"]
    assert by_time.columns == ["started_at", "request_sha256"]


def test_connect_is_idempotent_and_applies_nothing_twice(tmp_path):
    path = tmp_path / "c.db"
    store.connect(path).close()
    db = store.connect(path)
    names = [r["name"] for r in db.query("SELECT name FROM _sqlite_migrations")]
    assert len(names) == len(set(names)) == len(migrations._migrations)


def test_each_migration_applies_on_top_of_the_previous_schema(tmp_path):
    names = [m.name for m in migrations._migrations]
    for i, name in enumerate(names):
        path = tmp_path / f"{i}.db"
        db = store.connect(path, migrate=False)  # with the SQL functions the search migrations call
        migrations.apply(db, stop_before=name)  # a DB of the schema before `name`
        assert [m.name for m in migrations.applied(db)] == names[:i]
        db.close()
        db = store.connect(path)
        assert store.applied_migrations(db) == names
        db.close()


def test_two_processes_worth_of_connections_migrate_without_racing(tmp_path):
    path = tmp_path / "race.db"
    errors = []

    def open_one():
        try:
            store.connect(path, check_same_thread=False).close()
        except Exception as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = store.connect(path)
    assert db.execute("SELECT COUNT(*) FROM _sqlite_migrations").fetchone()[0] == len(migrations._migrations)


def test_capture_epoch_increments(tmp_path):
    db = store.connect(tmp_path / "c.db")
    assert store.next_capture_epoch(db) == 1
    assert store.next_capture_epoch(db) == 2
    assert store.get_meta(db, "capture_epoch") == "2"


def test_meta_and_events(tmp_path):
    db = store.connect(tmp_path / "c.db")
    assert store.get_meta(db, "nope", "d") == "d"
    store.set_meta(db, "k", "v1")
    store.set_meta(db, "k", "v2")
    assert store.get_meta(db, "k") == "v2"
    store.record_event(db, "dropped", count=3, detail="x" * 5000)
    row = next(db.query("SELECT * FROM store_events"))
    assert row["kind"] == "dropped" and row["count"] == 3 and len(row["detail"]) == 2000


def test_iso_is_fixed_width_utc_and_sorts_as_time():
    a, b = iso(1_750_000_000.0), iso(1_750_000_000.5)
    assert a == "2025-06-15T15:06:40.000000Z"
    assert len(a) == len(b) and a < b
    assert iso(None) is None


@pytest.mark.parametrize("bad", ["", "notadb"])
def test_connect_refuses_a_file_that_is_not_a_database(tmp_path, bad):
    path = tmp_path / "x.db"
    if bad:
        path.write_bytes(b"this is not sqlite" * 100)
        with pytest.raises(sqlite3.DatabaseError):
            store.connect(path)
    else:
        store.connect(path).close()  # an empty file is a fresh database


def test_iso_writes_the_text_datetime_writes_fixed_width_and_rounded_the_same_way():
    from datetime import UTC, datetime

    for ts in (0.0, 1.5, -1.25, 12.0000005, 12.0000015, 1700000000.9999996, 1760000000.123456, 253402300799.5):
        assert iso(ts) == datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert iso(None) is None
    with pytest.raises(ValueError):
        iso(253402300800.0)  # the year 10000 has no fixed-width text


def test_iso_of_timestamps_in_the_same_and_in_other_seconds_in_any_order():
    # iso keeps the last second it formatted: each text must still be datetime's.
    import random
    from datetime import UTC, datetime

    rng = random.Random(3)
    for _ in range(2000):
        ts = rng.choice((1_760_000_000, 1_760_000_001, 59, -2, 0)) + rng.choice((0.0, 0.4999996, 0.9999996, 0.25))
        assert iso(ts) == datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), ts
