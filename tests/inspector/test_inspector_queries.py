"""The read side used by the CLI and the web UI: JSON rows, prefixes, sessions, db status."""

from __future__ import annotations

import json

import pytest

from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store import queries

from support.factories import anthropic_request, anthropic_response, capture, make_exchange

T0 = 1_750_000_000.0


@pytest.fixture
def db_and_calls(tmp_path):
    calls = [
        make_exchange(id="aaaa0001", session_label="main", started_at=T0 + 1),
        make_exchange(
            id="aaaa0002",
            session_label="main",
            started_at=T0 + 2,
            request=anthropic_request(model="claude-haiku-4-5"),
            response=anthropic_response(
                usage={"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 50}
            ),
        ),
        make_exchange(
            id="bbbb0003",
            session_label="side",
            started_at=T0 + 3,
            status=529,
            outcome="http_error",
            response={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
            error="upstream said 529",
        ),
        make_exchange(
            id="cccc0004",
            session_label=None,
            key_fingerprint=None,
            started_at=T0 + 4,
            method="GET",
            path="/v1/models",
            request_body=b"",
            response_body=b'{"data": []}',
        ),
    ]
    path = tmp_path / "q.db"
    return capture(path, calls), calls, path


def test_list_calls_rows_carry_the_documented_fields(db_and_calls):
    db, calls, _ = db_and_calls
    rows = queries.list_calls(db)
    assert [r["id"] for r in rows] == ["cccc0004", "bbbb0003", "aaaa0002", "aaaa0001"]  # newest first
    first = rows[-1]
    for key in (
        "id",
        "session",
        "seq",
        "started_at",
        "api",
        "model",
        "method",
        "path",
        "status",
        "outcome",
        "stream",
        "request_bytes",
        "response_bytes",
        "ttfb_ms",
        "duration_ms",
        "usage",
        "provider",
        "attempt",
        "retry_of",
        "error",
    ):
        assert key in first
    assert first["started_at"] == "2025-06-15T15:06:41.000000Z"
    assert (first["ttfb_ms"], first["duration_ms"]) == (250.0, 500.0)
    assert first["usage"] == {"input": 110, "output": 3, "cache_read": 100, "cache_write": None}
    assert first["stream"] is False and first["request_bytes"] == len(calls[0].request_body)
    assert rows[2]["usage"] == {"input": 55, "output": 1, "cache_read": None, "cache_write": 50}
    assert rows[0]["usage"] is None and rows[0]["api"] is None
    assert rows[1]["error"] == "upstream said 529" and rows[1]["outcome"] == "http_error"
    json.dumps(rows)  # JSON-ready as they are


def test_list_calls_filters_and_pages(db_and_calls):
    db, _, _ = db_and_calls
    assert [r["seq"] for r in queries.list_calls(db, session="main", newest_first=False)] == [1, 2]
    assert [r["id"] for r in queries.list_calls(db, model="claude-haiku-4-5")] == ["aaaa0002"]
    assert [r["id"] for r in queries.list_calls(db, limit=2, offset=1)] == ["bbbb0003", "aaaa0002"]
    assert queries.list_calls(db, session="nope") == []


def test_get_call_by_id_or_unique_prefix(db_and_calls):
    db, _calls, _ = db_and_calls
    call = queries.get_call(db, "bbbb")
    assert call["id"] == "bbbb0003"
    assert ["x-api-key", "[redacted]"] in call["request_headers"]
    assert call["response_headers"] == [["content-type", "application/json"]]
    assert call["annotations"] == []
    assert call["response_error"]["type"] == "overloaded_error"
    assert queries.get_call(db, "aaaa0001")["usage_raw"]["cache_read_input_tokens"] == 100
    assert queries.get_call(db, "zzzz") is None
    with pytest.raises(queries.AmbiguousCallId):
        queries.get_call(db, "aaaa")


def test_bodies_and_final_response(db_and_calls):
    db, calls, _ = db_and_calls
    assert queries.get_request_raw(db, "aaaa0001") == calls[0].request_body
    assert queries.get_response_raw(db, "aaaa0001") == calls[0].response_body
    assert queries.get_request_json(db, "aaaa0002")["model"] == "claude-haiku-4-5"
    assert queries.get_final_response(db, "aaaa0001")["content"][0]["text"] == "hi there"
    assert queries.get_request_json(db, "cccc0004") is None
    with pytest.raises(KeyError):
        queries.get_request_raw(db, "nope")


def test_list_sessions(db_and_calls):
    db, _, _ = db_and_calls
    sessions = {s["session"]: s for s in queries.list_sessions(db)}
    assert set(sessions) == {"main", "side", "anon"}
    main = sessions["main"]
    assert main["calls"] == 2 and main["models"] == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    assert main["providers"] == ["anthropic"]
    assert main["first_started_at"] < main["last_started_at"]
    assert main["usage"] == {"input": 165, "output": 4, "cache_read": 100, "cache_write": 50}
    assert sessions["anon"]["usage"] is None
    assert queries.list_sessions(db)[0]["session"] == "anon"  # most recently active first


def test_db_status(db_and_calls, tmp_path):
    _db, calls, path = db_and_calls
    st = db_status(path)
    assert st["exists"] and st["calls"] == 4 and st["sessions"] == 3
    assert st["size_bytes"] >= path.stat().st_size
    assert st["journal_mode"] == "wal" and st["migrations_pending"] == []
    assert st["migrations_applied"][0] == "m001_create_blobs"
    assert st["last_capture_at"] == "2025-06-15T15:06:44.000000Z"
    assert st["capture_epoch"] == 1
    raw = sum(len(c.request_body) + len(c.response_body) for c in calls)
    assert st["blobs"]["raw_bytes"] == raw and st["blobs"]["stored_bytes"] > 0
    assert st["writer"] == {
        "write_failed": 0,
        "dropped": 0,
        "analysis_failed": 0,
        "parse_failed": 0,
        "store_unavailable": 0,
        "last_error": None,
    }
    missing = db_status(tmp_path / "none.db")
    assert missing == {
        "path": str(tmp_path / "none.db"),
        "exists": False,
        "capture": {"state": "no writer running"},
        "spool": {"files": 0, "bytes": 0, "left_by_stopped_writers": 0, "quarantined": []},
    }
    assert not (tmp_path / "none.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    assert "not a readable SQLite database" in db_status(junk)["error"]
