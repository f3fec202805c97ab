"""Bodies as shared chunks and header lists as shared sets, through the real writer: sessions share
what they re-send, deletion frees only what nothing uses any more, and a database written before
this layout still reads (and keeps growing)."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.blobs import sweep
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.derived.search import search
from ctxscope.inspector.store.layout.headers import join, split
from ctxscope.inspector.store.layout.legacy import make_delta, sha256
from ctxscope.inspector.store.migrations import migrations
from ctxscope.inspector.store.queries import get_call, get_request_raw, get_response_raw, open_db

from support.factories import anthropic_request, anthropic_response, capture, make_exchange

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

_WORDS = [f"w{i}x" for i in range(3000)]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n // 5))


def _session(label: str, system: str, tools: list, turns: int, seed: int) -> list:
    rng = random.Random(seed)
    messages: list = [{"role": "user", "content": _text(rng, 300)}]
    out = []
    for _ in range(turns):
        body = anthropic_request(list(messages), system=system, tools=tools, metadata={"user_id": label})
        answer = _text(rng, 400)
        out.append(make_exchange(request=body, response=anthropic_response(answer), session_label=label))
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": _text(rng, 2000)}]
    return out


def _chunk_bytes(db) -> int:
    return db.execute("SELECT COALESCE(SUM(length(data)), 0) FROM chunks").fetchone()[0]


SYSTEM = _text(random.Random(1), 20_000)
TOOLS = [
    {"name": f"tool{i}", "description": _text(random.Random(i), 1500), "input_schema": {"type": "object"}}
    for i in range(10)
]


def test_a_new_session_shares_the_system_prompt_and_tools_already_stored(tmp_path):
    path = tmp_path / "c.db"
    first = _session("first", SYSTEM, TOOLS, 6, seed=2)
    db = capture(path, first)
    before = _chunk_bytes(db)
    db.close()
    second = _session("second", SYSTEM, TOOLS, 1, seed=3)
    db = capture(path, second)
    added = _chunk_bytes(db) - before
    raw = get_request_raw(db, second[0].id)
    assert raw == second[0].request_body
    # ~35 KB of system prompt and tools are already stored: only the new message and answer are added.
    assert len(raw) > 30_000 and added < 3000
    db.close()


def test_deleting_a_session_frees_what_only_it_used_and_keeps_what_others_share(tmp_path):
    path = tmp_path / "c.db"
    keep = _session("keep", SYSTEM, TOOLS, 4, seed=4)
    drop = _session("drop", SYSTEM, TOOLS, 14, seed=5)
    db = capture(path, keep + drop, analyzers=writer_analyzers())
    chunks_before = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    result = delete_session(db, "drop")
    assert result["calls_deleted"] == 14 and result["blobs_deleted"] > 0
    assert db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] < chunks_before
    assert sweep(db) == 0  # nothing left that no blob uses
    for ex in keep:
        assert get_request_raw(db, ex.id) == ex.request_body
        assert get_response_raw(db, ex.id) == ex.response_body
        assert get_call(db, ex.id)["request_headers"] == [list(p) for p in ex.request_headers]
    sets = "SELECT request_header_set FROM calls UNION SELECT response_header_set FROM calls"
    used = {r[0] for r in db.execute(sets)}
    assert {r[0] for r in db.execute("SELECT id FROM header_sets")} <= used
    db.close()


def test_header_lists_come_back_exactly_from_their_shared_sets(tmp_path):
    pairs = [
        ["content-type", "application/json"],
        ["Date", "Tue, 01 Dec 2026 11:35:34 GMT"],
        ["request-id", "req_1"],
        ["anthropic-ratelimit-tokens-remaining", "9000"],
        ["x-app", "cli"],
        ["content-length", "17"],
        ["DATE", ""],
    ]
    shape, values = split(pairs)
    assert values == ["Tue, 01 Dec 2026 11:35:34 GMT", "req_1", "9000", "17", ""]
    assert join(shape, values) == pairs
    calls = [
        make_exchange(i, response_headers=(("content-type", "application/json"), ("request-id", f"req_{i}")))
        for i in range(5)
    ]
    db = capture(tmp_path / "h.db", calls)
    assert db.execute("SELECT COUNT(*) FROM header_sets").fetchone()[0] == 2  # one request set, one response set
    for ex in calls:
        row = get_call(db, ex.id)
        assert row["response_headers"] == [list(p) for p in ex.response_headers]
        assert row["request_headers"] == [list(p) for p in ex.request_headers]
    db.close()


def _old_database(path) -> None:
    """A file as the layout before chunks wrote it: delta blobs, header lists in the row, search text in full."""
    db = store.connect(path, migrate=False, segment_texts=SegmentTexts)
    migrations.apply(db, stop_before="m011_create_chunks")
    first = json.dumps(anthropic_request([{"role": "user", "content": "the old lighthouse keeper"}])).encode()
    second = first[:-1] + b', "temperature": 1}'
    k = db.execute(
        "INSERT INTO blobs (sha256, size, base, depth, prefix_len, suffix_len, data) VALUES (?, ?, NULL, 0, 0, 0, ?)",
        [sha256(first), len(first), zstd.compress(first)],
    ).lastrowid
    d = make_delta(first, second)
    delta = db.execute(
        "INSERT INTO blobs (sha256, size, base, depth, prefix_len, suffix_len, data) VALUES (?, ?, ?, 1, ?, ?, ?)",
        [sha256(second), len(second), k, d.prefix_len, d.suffix_len, zstd.compress(d.middle)],
    ).lastrowid
    for i, blob in enumerate((k, delta)):
        db.execute(
            "INSERT INTO calls (id, session, seq, request_blob, request_headers, response_headers, "
            "started_at, outcome, status, method, path, api) VALUES (?, 'old', ?, ?, ?, ?, ?, 'ok', 200, "
            "'POST', '/v1/messages', 'anthropic.messages')",
            [
                f"old{i}",
                i + 1,
                blob,
                json.dumps([["x-app", "cli"], ["x-api-key", "[redacted]"]]),
                json.dumps([["request-id", f"req_{i}"]]),
                f"2026-01-01T00:00:0{i}.000000Z",
            ],
        )
    seg = db.execute(
        "INSERT INTO search_segments (hash, area, text) VALUES (?, 'messages', ?)",
        ["ab" * 32, "the old lighthouse keeper"],
    ).lastrowid
    db.execute(
        "INSERT INTO search_occurrences (segment, session, call_id, body, pointer) "
        "VALUES (?, 'old', 'old0', 'request', '/messages/0/content')",
        [seg],
    )
    db.conn.commit()
    db.close()
    return first, second


def test_a_database_written_before_this_layout_reads_and_grows(tmp_path):
    path = tmp_path / "old.db"
    first, second = _old_database(path)
    db = open_db(path, segment_texts=SegmentTexts)  # migrates
    assert get_request_raw(db, "old0") == first and get_request_raw(db, "old1") == second
    assert get_call(db, "old1")["request_headers"] == [["x-app", "cli"], ["x-api-key", "[redacted]"]]
    assert get_call(db, "old1")["response_headers"] == [["request-id", "req_1"]]
    [hit] = search(db, "lighthouse keeper")
    assert (hit["call"], hit["pointer"]) == ("old0", "/messages/0/content")
    db.close()
    new = _session("new", SYSTEM, TOOLS, 2, seed=6)
    db = capture(path, new, analyzers=writer_analyzers())
    for ex in new:
        assert get_request_raw(db, ex.id) == ex.request_body
    assert get_request_raw(db, "old1") == second
    assert delete_session(db, "old")["calls_deleted"] == 2
    assert search(db, "lighthouse keeper") == []
    db.close()


def test_a_phrase_matches_only_words_that_stand_together(tmp_path):
    texts = ["the Lighthouse-Keeper of Brûlée point", "a keeper of the lighthouse", "lighthouse and then keeper"]
    db = capture(
        tmp_path / "s.db",
        [
            make_exchange(request=anthropic_request([{"role": "user", "content": t}]), session_label=f"s{i}")
            for i, t in enumerate(texts)
        ],
        analyzers=writer_analyzers(),
    )
    [hit] = search(db, "lighthouse keeper")
    assert hit["session"] == "s0" and "\x02Lighthouse-Keeper\x03" in hit["snippet"]
    assert {h["session"] for h in search(db, "keeper")} == {"s0", "s1", "s2"}
    assert [h["session"] for h in search(db, "BRULEE point")] == ["s0"]  # case and accents folded
    assert search(db, "keeper lighthouse") == [] and search(db, "!!") == []
    db.close()


def test_every_lookup_of_the_same_request_reads_only_the_window_of_the_time_index(tmp_path):
    """Retry linkage and the unnamed-call lookup must not walk a session's (or a key's) calls, nor the
    whole table: they read the window's entries of the time index, which carries the request hash."""
    from ctxscope.inspector.store.ingest import IngestState, ingest

    db = store.connect(tmp_path / "r.db", segment_texts=SegmentTexts)
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    state = IngestState(capture_epoch=1)
    analyzers = writer_analyzers()
    for ex in [make_exchange(i) for i in range(3)] + [make_exchange(7, session_label=None, key_fingerprint=None)]:
        db.execute("BEGIN IMMEDIATE")
        ingest(db, ex, state, analyzers)
        db.execute("COMMIT")
    db.conn.set_trace_callback(None)
    lookups = {sql for sql in seen if "request_sha256 =" in sql and sql.lstrip().upper().startswith("SELECT")}
    assert any("+session" in sql for sql in lookups)  # retry linkage (ingest and the analysis)
    assert any("grouped_by IN" in sql for sql in lookups)  # a call without a session id
    for sql in lookups:
        plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql))
        assert "USING INDEX idx_calls_started_at (started_at>? AND started_at<?)" in plan, (sql, plan)
    db.close()


def test_a_request_blob_takes_its_hash_from_the_request_digest_and_reads_back_verified(tmp_path):
    """The writer hashes a request once (resuming from a recent body's state when it continues one)
    and gives that digest to the blob: every body, plain or gzip-encoded, new or continuing the last,
    reads back byte for byte, and its blob's hash is the first 16 bytes of its SHA-256."""
    rng = random.Random(7)
    messages: list = [{"role": "user", "content": _text(rng, 200_000)}]
    exs = []
    for i in range(4):
        messages = messages + [
            {"role": "assistant", "content": _text(rng, 300)},
            {"role": "user", "content": f"next {i}"},
        ]
        exs.append(make_exchange(request=anthropic_request(list(messages))))
    body = json.dumps(anthropic_request(messages + [{"role": "user", "content": "zipped"}])).encode()
    exs.append(
        make_exchange(
            request_body=gzip.compress(body, mtime=0),
            request_headers=(("content-type", "application/json"), ("content-encoding", "gzip")),
        )
    )
    db = capture(tmp_path / "h.db", exs, analyzers=writer_analyzers())
    try:
        for ex in exs:
            assert get_request_raw(db, ex.id) == ex.request_body  # the read verifies the blob's hash
            blob_hash, sha = db.execute(
                "SELECT b.hash, c.request_sha256 FROM calls c JOIN blobs b ON b.id = c.request_blob WHERE c.id = ?",
                [ex.id],
            ).fetchone()
            stored = body if ex is exs[-1] else ex.request_body  # the gzip body is kept decoded, with its recipe
            assert blob_hash == hashlib.sha256(stored).digest()[:16] and sha == blob_hash.hex()
    finally:
        db.close()
