"""The capture store's connection: WAL, synchronous=NORMAL, migrations, meta and events.

Also home of the test factories (``make_exchange`` and friends) the other inspector store tests
import, so each test states only what matters to it.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time

import pytest

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.migrations import migrations
from ctxscope.proxy.exchange import Exchange

_ids = itertools.count(1)


def make_exchange(**overrides) -> Exchange:
    """A successful non-streamed Anthropic Messages call; override any field."""
    n = next(_ids)
    t = overrides.pop("started_at", 1_750_000_000.0 + n)
    request = overrides.pop("request", None)
    response = overrides.pop("response", None)
    values = dict(
        id=f"{time.time_ns():016x}{n:06x}",
        provider="anthropic",
        upstream="https://api.anthropic.com",
        method="POST",
        path="/v1/messages",
        query="",
        session_label="s1",
        annotations=(),
        request_headers=(("content-type", "application/json"), ("x-api-key", "[redacted]")),
        key_fingerprint="f" * 16,
        request_body=json.dumps(request or anthropic_request()).encode(),
        status=200,
        response_headers=(("content-type", "application/json"),),
        response_body=json.dumps(response or anthropic_response()).encode(),
        started_at=t,
        first_byte_at=t + 0.25,
        ended_at=t + 0.5,
        outcome="ok",
        error=None,
        client="test-agent/1.0",
    )
    values.update(overrides)
    return Exchange(**values)


def anthropic_request(messages=None, **extra) -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "You are a test.",
        "messages": messages or [{"role": "user", "content": "hello"}],
        **extra,
    }


def anthropic_response(text="hi there", usage=None) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100},
    }


def anthropic_sse(text="streamed answer", input_tokens=12, output_tokens=4) -> bytes:
    """A streamed Anthropic Messages response as the wire carries it."""
    msg = {"id": "msg_s", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
           "stop_reason": None, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}
    events = [
        ("message_start", {"type": "message_start", "message": msg}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
    ]
    for word in text.split(" "):
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": word + " "}}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": output_tokens}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


# -- tests ----------------------------------------------------------------------------------


def test_connect_creates_schema_in_wal_with_synchronous_normal(tmp_path):
    db = store.connect(tmp_path / "sub" / "c.db")
    assert db.journal_mode == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert {"calls", "blobs", "meta", "store_events"} <= set(db.table_names())
    assert store.applied_migrations(db) == [m.name for m in migrations._migrations]
    assert all(m.name.startswith(("m0", "m1")) and m.name[1:4].isdigit() for m in migrations._migrations)
    indexes = {i.name for i in db["calls"].indexes}
    assert {"idx_calls_session_seq", "idx_calls_started_at", "idx_calls_model", "idx_calls_retry"} <= indexes


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
        conn = sqlite3.connect(path)
        db = store.sqlite_utils.Database(conn)
        migrations.apply(db, stop_before=name)  # a DB of the schema before `name`
        assert [m.name for m in migrations.applied(db)] == names[:i]
        conn.close()
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
    a, b = store.iso(1_750_000_000.0), store.iso(1_750_000_000.5)
    assert a == "2025-06-15T15:06:40.000000Z"
    assert len(a) == len(b) and a < b
    assert store.iso(None) is None


@pytest.mark.parametrize("bad", ["", "notadb"])
def test_connect_refuses_a_file_that_is_not_a_database(tmp_path, bad):
    path = tmp_path / "x.db"
    if bad:
        path.write_bytes(b"this is not sqlite" * 100)
        with pytest.raises(sqlite3.DatabaseError):
            store.connect(path)
    else:
        store.connect(path).close()  # an empty file is a fresh database
