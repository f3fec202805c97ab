"""From Exchange to stored call, through the real CaptureWriter: bodies, growth, parsing, sessions, retries."""

from __future__ import annotations

import gzip
import io
import json
import random
import sys
import time

import pytest

from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.ingest import RETRY_WINDOW_S, RecentFailures

from support.factories import anthropic_request, anthropic_response, anthropic_sse, capture, make_exchange

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

_WORDS = [f"w{i:x}{'abcdefgh'[i % 8] * (i % 5)}" for i in range(2000)]


def words(rng: random.Random, nbytes: int) -> str:
    """Text that compresses like prose (not like zeros, not like noise)."""
    out, size = [], 0
    while size < nbytes:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def _db_size(path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


@pytest.mark.slow
def test_storage_grows_with_new_content_not_with_calls_times_context(tmp_path):
    """200 calls re-sending a 100 KB prefix that grows ~1 KB per call cost far less than 200 x 100 KB."""
    rng = random.Random(42)
    system = words(rng, 100_000)
    tools = [{"name": "read", "description": words(rng, 300), "input_schema": {"type": "object"}}]
    messages: list[dict] = []
    exchanges = []
    for i in range(200):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": words(rng, 1000)})
        body = json.dumps(anthropic_request(messages=list(messages), system=system, tools=tools, stream=True)).encode()
        exchanges.append(
            make_exchange(
                session_label="growth",
                request_body=body,
                response_headers=(("content-type", "text/event-stream"),),
                response_body=anthropic_sse(words(rng, 400), input_tokens=1000 + i),
            )
        )
    path = tmp_path / "growth.db"
    db = capture(path, exchanges)
    raw_requests = sum(len(e.request_body) for e in exchanges)
    assert raw_requests > 200 * 100_000
    assert _db_size(path) < 0.10 * 200 * 100_000
    for ex in exchanges:  # every body back, byte for byte
        assert queries.get_request_raw(db, ex.id) == ex.request_body
        assert queries.get_response_raw(db, ex.id) == ex.response_body
    status = db_status(path)
    assert status["calls"] == 200 and status["blobs"]["ratio"] < 0.05


def test_compressed_request_bodies_of_a_session_are_stored_as_deltas_and_round_trip(tmp_path):
    """A client that zstd-compresses every body (pi does) still costs only its new content."""
    rng = random.Random(1)
    system = words(rng, 50_000)
    messages: list[dict] = []
    exchanges = []
    for _ in range(40):
        messages.append({"role": "user", "content": words(rng, 800)})
        body = json.dumps(anthropic_request(messages=list(messages), system=system)).encode()
        exchanges.append(
            make_exchange(
                session_label="pi",
                request_headers=(("content-type", "application/json"), ("content-encoding", "zstd")),
                request_body=zstd.compress(body),
            )
        )
    path = tmp_path / "z.db"
    db = capture(path, exchanges)
    for ex in exchanges:
        assert queries.get_request_raw(db, ex.id) == ex.request_body
        assert queries.get_request_json(db, ex.id)["system"] == system
    recodes = {r[0] for r in db.execute("SELECT request_recode FROM calls")}
    assert recodes == {"zstd:3"}
    stored = db.execute("SELECT SUM(length(data)) FROM blobs").fetchone()[0]
    assert stored < 0.25 * sum(len(e.request_body) for e in exchanges)


def test_unreproducible_compression_is_stored_raw_and_round_trips(tmp_path):
    body = json.dumps(anthropic_request()).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="x.json", mode="wb", fileobj=buf, mtime=7) as f:
        f.write(body)
    ex = make_exchange(request_headers=(("content-encoding", "gzip"),), request_body=buf.getvalue())
    db = capture(tmp_path / "c.db", [ex])
    call = queries.get_call(db, ex.id)
    assert call["request_recode"] is None and call["request_encoding"] == "gzip"
    assert call["request_json_ok"] == 1 and call["model"] == "claude-sonnet-4-5"
    assert queries.get_request_raw(db, ex.id) == ex.request_body
    assert queries.get_request_json(db, ex.id) == json.loads(body)


def test_gzip_response_round_trips_and_is_parsed(tmp_path):
    resp = gzip.compress(json.dumps(anthropic_response("zipped")).encode())
    ex = make_exchange(
        response_headers=(("content-type", "application/json"), ("content-encoding", "gzip")), response_body=resp
    )
    db = capture(tmp_path / "c.db", [ex])
    assert queries.get_response_raw(db, ex.id) == resp
    assert queries.get_final_response(db, ex.id)["content"][0]["text"] == "zipped"
    assert queries.get_call(db, ex.id)["response_recode"].startswith("gzip:")


def test_malformed_and_undecodable_bodies_are_kept_as_is(tmp_path):
    bad_json = make_exchange(request_body=b'{"model": "x", "messages": [')
    bad_gzip = make_exchange(
        request_headers=(("content-encoding", "gzip"),), request_body=b"\x1f\x8b\x08 not really gzip"
    )
    empty = make_exchange(method="GET", path="/v1/models", request_body=b"", request_headers=())
    db = capture(tmp_path / "c.db", [bad_json, bad_gzip, empty])
    a, b, c = (queries.get_call(db, e.id) for e in (bad_json, bad_gzip, empty))
    assert a["request_json_ok"] == 0 and a["model"] == "claude-sonnet-4-5"  # model from the response
    assert queries.get_request_raw(db, bad_json.id) == bad_json.request_body
    assert queries.get_request_json(db, bad_json.id) is None
    assert b["request_decode_error"] and b["request_json_ok"] is None
    assert queries.get_request_raw(db, bad_gzip.id) == bad_gzip.request_body
    assert queries.get_request_body(db, bad_gzip.id) is None
    assert c["request_blob"] is None and queries.get_request_raw(db, empty.id) == b""
    assert c["api"] is None and c["request_json_ok"] is None


def test_streamed_response_is_reassembled_with_usage(tmp_path):
    ex = make_exchange(
        request_body=json.dumps(anthropic_request(stream=True)).encode(),
        response_headers=(("content-type", "text/event-stream"),),
        response_body=anthropic_sse("one two three", input_tokens=20, output_tokens=7),
    )
    db = capture(tmp_path / "c.db", [ex])
    call = queries.get_call(db, ex.id)
    assert call["stream"] is True and call["response_complete"] == 1 and call["stop_reason"] == "end_turn"
    assert call["usage"] == {"input": 20, "output": 7, "cache_read": None, "cache_write": None}
    assert call["event_count"] > 5
    final = queries.get_final_response(db, ex.id)
    assert final["content"][0]["text"].split() == ["one", "two", "three"]
    assert queries.get_response_raw(db, ex.id) == ex.response_body


def test_usage_not_reported_is_null_not_zero(tmp_path):
    ex = make_exchange(response=anthropic_response(usage={}))
    openai = make_exchange(
        provider="openai",
        path="/v1/chat/completions",
        request_body=json.dumps({"model": "gpt-5", "messages": [], "stream": True}).encode(),
        response_headers=(("content-type", "text/event-stream"),),
        response_body=b'data: {"id":"c","object":"chat.completion.chunk",'
        b'"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n',
    )
    db = capture(tmp_path / "c.db", [ex, openai])
    assert queries.get_call(db, openai.id)["usage"] is None
    assert queries.get_call(db, openai.id)["stream"] is True
    assert queries.get_call(db, openai.id)["api"] == "openai.chat"


def test_sessions_and_seq(tmp_path):
    exs = [
        make_exchange(session_label="a"),
        make_exchange(session_label=None, key_fingerprint="0123456789abcdef"),
        make_exchange(session_label="a"),
        make_exchange(session_label=None, key_fingerprint=None),
        make_exchange(session_label=None, key_fingerprint="0123456789abcdef"),
    ]
    db = capture(tmp_path / "c.db", exs)
    got = [(queries.get_call(db, e.id)["session"], queries.get_call(db, e.id)["seq"]) for e in exs]
    assert got == [("a", 1), ("key:0123456789ab", 1), ("a", 2), ("anon", 1), ("key:0123456789ab", 2)]


def test_retry_linkage(tmp_path):
    body = json.dumps(anthropic_request(messages=[{"role": "user", "content": "retry me"}])).encode()
    t = 1_760_000_000.0
    first = make_exchange(
        request_body=body, started_at=t, status=529, outcome="http_error", response=anthropic_response()
    )
    second = make_exchange(request_body=body, started_at=t + 2, status=None, outcome="upstream_reset")
    third = make_exchange(request_body=body, started_at=t + 5)
    again = make_exchange(request_body=body, started_at=t + 9)  # the previous one succeeded: a new call
    late_fail = make_exchange(request_body=body, started_at=t + 10, status=429, outcome="http_error")
    too_late = make_exchange(request_body=body, started_at=t + 10 + 121)
    other_session = make_exchange(request_body=body, started_at=t + 3, session_label="other")
    db = capture(tmp_path / "c.db", [first, second, third, again, late_fail, too_late, other_session])
    link = {
        e.id: (queries.get_call(db, e.id)["attempt"], queries.get_call(db, e.id)["retry_of"])
        for e in (first, second, third, again, late_fail, too_late, other_session)
    }
    assert link[first.id] == (1, None)
    assert link[second.id] == (2, first.id)
    assert link[third.id] == (3, second.id)
    assert link[again.id] == (1, None)
    assert link[late_fail.id] == (1, None)
    assert link[too_late.id] == (1, None)
    assert link[other_session.id] == (1, None)


def test_retry_linkage_of_calls_made_while_the_writer_runs(tmp_path):
    """Calls that start after the writer did are linked from its memory of failed bodies, with the
    store's answer: a retry of a failed call, never of a success, a body that never failed."""
    body = json.dumps(anthropic_request(messages=[{"role": "user", "content": "live retry"}])).encode()
    other = json.dumps(anthropic_request(messages=[{"role": "user", "content": "never failed"}])).encode()
    t = time.time() + 5  # after the writer started
    failed = make_exchange(request_body=body, started_at=t, status=500, outcome="http_error")
    retried = make_exchange(request_body=body, started_at=t + 1)
    fine = make_exchange(request_body=other, started_at=t + 2)
    same_again = make_exchange(request_body=other, started_at=t + 3)
    db = capture(tmp_path / "c.db", [failed, retried, fine, same_again])
    link = {
        e.id: (queries.get_call(db, e.id)["attempt"], queries.get_call(db, e.id)["retry_of"])
        for e in (failed, retried, fine, same_again)
    }
    assert link == {failed.id: (1, None), retried.id: (2, failed.id), fine.id: (1, None), same_again.id: (1, None)}


def test_a_retry_stored_by_the_next_writer_is_linked_to_the_failure_the_last_one_stored(tmp_path):
    """A new writer learns the failures stored in the retry window before the store's latest call,
    and links a retry of one of them as the writer that stored it would have."""
    body = json.dumps(anthropic_request(messages=[{"role": "user", "content": "across a restart"}])).encode()
    t = time.time() + 5
    failed = make_exchange(request_body=body, started_at=t, status=None, outcome="upstream_reset")
    capture(tmp_path / "c.db", [failed])
    retried = make_exchange(request_body=body, started_at=t + 1)
    db = capture(tmp_path / "c.db", [retried])
    assert (queries.get_call(db, retried.id)["attempt"], queries.get_call(db, retried.id)["retry_of"]) == (2, failed.id)


def test_the_memory_of_failed_bodies_forgets_only_by_asking_the_store_again():
    failures = RecentFailures(since=1000.0, keep=4)
    assert failures.may_have("a", 1000.0 + RETRY_WINDOW_S - 1)  # its window reaches back before the writer
    assert not failures.may_have("a", 1000.0 + RETRY_WINDOW_S + 1) and not failures.may_have(None, 5000.0)
    for i, sha in enumerate("abcde"):
        failures.add(sha, 2000.0 + i)
    # Too many: the oldest were forgotten, so a window that reaches them is looked up in the store.
    assert all(failures.may_have(sha, 2000.0 + RETRY_WINDOW_S) for sha in "abcdez")
    assert failures.may_have("e", 9000.0) and not failures.may_have("z", 9000.0)


def test_model_and_api_detection(tmp_path):
    gemini = make_exchange(
        provider="u/gemini",
        path="/v1beta/models/gemini-2.5-pro:generateContent",
        request_body=b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}',
        response=(
            {
                "candidates": [{"content": {"parts": [{"text": "yo"}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
            }
        ),
    )
    responses = make_exchange(
        provider="openai", path="/v1/responses", request_body=b'{"model":"gpt-5","input":"hi","stream":false}'
    )
    db = capture(tmp_path / "c.db", [gemini, responses])
    g = queries.get_call(db, gemini.id)
    assert (g["api"], g["model"], g["usage"]["input"]) == ("gemini.generate", "gemini-2.5-pro", 5)
    r = queries.get_call(db, responses.id)
    assert (r["api"], r["model"], r["stream"]) == ("openai.responses", "gpt-5", False)


def test_no_key_in_the_database_file(tmp_path):
    """Even if a key slipped past the proxy's redaction (query string, a header), the store redacts it."""
    key = "AIzaSyA-secret-key-value-0123456789abc"
    ex = make_exchange(
        provider="u/gemini",
        path="/v1beta/models/g:generateContent",
        query=f"key={key}&alt=sse",
        request_headers=(("x-goog-api-key", key), ("content-type", "application/json")),
        response_headers=(("set-cookie", f"k={key}"),),
    )
    path = tmp_path / "c.db"
    db = capture(path, [ex])
    assert "redacted" in queries.get_call(db, ex.id)["query"]
    db.close()
    for f in path.parent.glob(path.name + "*"):
        assert key.encode() not in f.read_bytes()


def test_capture_epoch_marks_each_writer_start(tmp_path):
    path = tmp_path / "c.db"
    a, b = make_exchange(), make_exchange()
    capture(path, [a]).close()
    db = capture(path, [b])
    assert queries.get_call(db, a.id)["capture_epoch"] == 1
    assert queries.get_call(db, b.id)["capture_epoch"] == 2


def test_analyzer_sees_the_row_and_what_was_parsed(tmp_path):
    seen = []

    def analyzer(db, call):
        seen.append(call)
        db.execute("UPDATE calls SET error = 'analyzed' WHERE id = ?", [call["id"]])

    ex = make_exchange()
    db = capture(tmp_path / "c.db", [ex], analyzers=[analyzer])
    (call,) = seen
    assert call["id"] == ex.id and call["seq"] == 1 and call["_exchange"] is ex
    assert call["_request_json"]["model"] == "claude-sonnet-4-5"
    assert call["_parsed"].usage.output == 3 and call["_request_body"] == ex.request_body
    assert queries.get_call(db, ex.id)["error"] == "analyzed"  # in the same transaction as the insert


def test_calls_that_leave_different_columns_empty_are_each_stored_whole(tmp_path):
    """A call's empty columns are left out of its INSERT (NULL is their default): answered, unanswered
    and refused calls, in turns, each keep exactly their own values, and the retry of the unanswered
    one is numbered as before (``attempt`` has a default of its own)."""
    ok = make_exchange(1)
    unanswered = make_exchange(
        2,
        status=None,
        response_headers=(),
        response_body=b"",
        first_byte_at=None,
        outcome="upstream_unreachable",
        error="connection refused",
    )
    retry = make_exchange(2, started_at=unanswered.started_at + 1)
    refused = make_exchange(3, status=413, response_body=b"", outcome="request_too_large", error="too large")
    db = capture(tmp_path / "c.db", [ok, unanswered, refused, retry, make_exchange(4)])
    columns = (
        "stream",
        "status",
        "outcome",
        "error",
        "ttfb_ms",
        "response_blob",
        "response_content_type",
        "usage_input",
        "usage_output",
        "stop_reason",
        "response_complete",
        "attempt",
        "retry_of",
    )
    rows = {r["id"]: r for r in db.query(f"SELECT id, {', '.join(columns)} FROM calls")}
    assert {k: rows[ok.id][k] for k in ("status", "outcome", "error", "ttfb_ms", "attempt", "retry_of")} == {
        "status": 200,
        "outcome": "ok",
        "error": None,
        "ttfb_ms": 250.0,
        "attempt": 1,
        "retry_of": None,
    }
    assert rows[ok.id]["response_blob"] is not None and rows[ok.id]["usage_input"] is not None
    assert rows[ok.id]["stream"] == 0  # a zero is a value, not an empty column
    gone = rows[unanswered.id]
    assert gone["status"] is None and gone["ttfb_ms"] is None and gone["response_blob"] is None
    assert gone["usage_input"] is None and gone["usage_output"] is None and gone["stop_reason"] is None
    assert (gone["outcome"], gone["error"], gone["attempt"]) == ("upstream_unreachable", "connection refused", 1)
    assert (rows[refused.id]["status"], rows[refused.id]["outcome"]) == (413, "request_too_large")
    assert rows[refused.id]["response_blob"] is None
    assert (rows[retry.id]["attempt"], rows[retry.id]["retry_of"]) == (2, unanswered.id)
    for ex in (ok, unanswered, refused, retry):
        assert queries.get_request_raw(db, ex.id) == ex.request_body
        assert queries.get_response_raw(db, ex.id) == ex.response_body


def test_a_new_writer_looks_up_only_the_bodies_it_knows_failed(tmp_path):
    """After a restart, the failures of the last retry window come from the store once: a new call
    whose body never failed asks the store nothing, a retry of a stored failure is linked, and a call
    that began before that window (a long stream that ends now) is still looked up."""
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.store import db as store
    from ctxscope.inspector.store.ingest import IngestState, ingest, stored_failures

    t = time.time()
    body = json.dumps(anthropic_request(messages=[{"role": "user", "content": "failed once"}])).encode()
    failed = make_exchange(request_body=body, started_at=t - 30, status=429, outcome="http_error")
    capture(tmp_path / "c.db", [make_exchange(i, started_at=t - 60 + i) for i in range(20)] + [failed])
    db = store.connect(tmp_path / "c.db")
    state = IngestState(capture_epoch=2, failures=stored_failures(db))
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    fresh = [make_exchange(100 + i, started_at=t + i) for i in range(5)]
    retried = make_exchange(request_body=body, started_at=t + 6)
    long_stream = make_exchange(200, started_at=t - 600)
    for ex in [*fresh, retried, long_stream]:
        db.execute("BEGIN IMMEDIATE")
        row = ingest(db, ex, state, writer_analyzers()).row
        db.execute("COMMIT")
        asked = [sql for sql in seen if "request_sha256 =" in sql]
        seen.clear()
        if ex in fresh:
            assert asked == [] and (row["attempt"], row["retry_of"]) == (1, None)
        elif ex is retried:
            assert asked and (row["attempt"], row["retry_of"]) == (2, failed.id)
        else:
            assert asked and (row["attempt"], row["retry_of"]) == (1, None)
    db.conn.close()
