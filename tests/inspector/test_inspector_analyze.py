"""The analyzer in the real CaptureWriter on real SQLite files: what it stores on each call row,
what it remembers between calls, how it rebuilds after a restart, and reindex."""

from __future__ import annotations

import json

import pytest

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.incremental import prepare_full
from ctxscope.inspector.pipeline.analysis_input import parse_event
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.pipeline.recent import RecentMemory, Remembered
from ctxscope.inspector.pipeline.reindex import reindex
from ctxscope.inspector.pipeline.scopes import UNNAMED
from ctxscope.inspector.store import queries

from support.factories import T0, anthropic_response, make_exchange
from support.factories import analysed as run
from support.factories import exchange_at as ex
from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    claude_code_turns,
    long_text,
    make_anthropic_body,
    make_chat_body,
    text,
    user,
)

ANALYSIS = (
    "session",
    "seq",
    "session_source",
    "thread",
    "parent_thread",
    "predecessor",
    "relation",
    "pointer",
    "epoch_reason",
    "relation_detail",
    "tokens_estimated",
    "tokens_by_category",
    "cache_verdict",
    "cache",
    "cache_lost_tokens",
    "cache_lost_usd",
    "markers",
    "has_compaction_before",
    "response_id",
    "attempt",
    "retry_of",
)


def rows(db):
    return [queries.get_call(db, r["id"]) for r in queries.list_calls(db, limit=None, newest_first=False)]


def snapshot(db):
    return {r["id"]: {k: r[k] for k in ANALYSIS} for r in rows(db)}


def test_each_call_row_carries_its_analysis(tmp_path):
    bodies = claude_code_turns(3, reminders=(2,))
    db, _ = run(tmp_path / "c.db", [ex(b, i) for i, b in enumerate(bodies)])
    first, second, third = rows(db)
    assert (first["relation"], first["epoch_reason"], first["predecessor"]) == ("EPOCH_START", "session_start", None)
    assert (second["relation"], second["predecessor"], third["predecessor"]) == (
        "APPEND_ONLY",
        first["id"],
        second["id"],
    )
    assert first["session"] == "key:ffffffffffff:" + first["id"] and first["session_source"] == "key"
    assert [r["grouped_by"] for r in (first, second, third)] == ["new", "lineage", "lineage"]
    assert {r["thread"] for r in (first, second, third)} == {first["id"]} and first["parent_thread"] is None
    assert second["relation_detail"] == {"detail": None, "shared_segments": 6, "marker_moves": ["/messages/0/content"]}
    assert third["tokens_estimated"] == sum(third["tokens_by_category"].values()) > second["tokens_estimated"]
    assert [m["kind"] for m in third["markers"]] == ["reminder", "tools_executed"]
    assert third["markers"][0]["pointer"] == "/messages/4/content/1"
    assert first["response_id"] == "msg_1" and first["has_compaction_before"] is False
    assert first["analysis_version"] == 1
    assert (first["cache"]["family"], first["cache"]["reason"]) == ("anthropic", "first_call")


def test_a_call_costs_only_its_new_segments(tmp_path):
    analyzer = Analyzer()
    bodies = claude_code_turns(12)
    _db, _ = run(tmp_path / "c.db", [ex(b, i) for i, b in enumerate(bodies[:10])], analyzer)
    before = analyzer.counter.misses
    run(tmp_path / "c.db", [ex(bodies[10], 10)], analyzer)  # same analyzer, so no cold start
    new = len(canonicalize("anthropic.messages", bodies[10]).segments) - len(
        canonicalize("anthropic.messages", bodies[9]).segments
    )
    assert analyzer.counter.misses - before == new == 3  # assistant text, its tool call, the tool result
    client = rows(_db)[0]["client"]
    scope = (UNNAMED + (client or ""), "f" * 16)
    [latest] = [r for r in analyzer.memory.calls(scope) if r.prepared.raw is not None]
    # every message but the one whose cache marker moved was reused, not canonicalised again
    assert latest.prepared.reused_items == len(bodies[9]["messages"]) - 1


def test_memory_keeps_the_latest_call_per_thread_and_stays_bounded():
    bodies = claude_code_turns(3)
    prepared = [prepare_full("anthropic.messages", b, json.dumps(b).encode()) for b in bodies]
    mem = RecentMemory(per_thread=2, threads=2, max_scopes=2, max_bytes=10**9)

    def remember(scope, thread, i):
        mem.add(scope, Remembered(f"c{i}", scope[0], thread, prepared[i % 3], None, float(i), 1, "anthropic", "x"))

    for i in range(3):
        remember(("s", None), "t1", i)
    c1, c2 = mem.calls(("s", None))
    assert (c1.call_id, c2.call_id) == ("c1", "c2") and c1.prepared.raw is None and c2.prepared.raw is not None
    assert c1.prompt is prepared[1].prompt and c1.size < c2.size  # only the latest keeps its raw body
    remember(("s", None), "t2", 3)
    remember(("s", None), "t3", 4)  # t1 is the least recently active thread
    assert [r.thread for r in mem.calls(("s", None))] == ["t2", "t3"]
    remember(("u", None), "t", 5)
    remember(("v", None), "t", 6)
    assert ("s", None) not in mem and mem.calls(("s", None)) is None
    assert mem.bytes == sum(r.size for sc in (("u", None), ("v", None)) for r in mem.calls(sc))
    one = Remembered("c", "a", "t", prepared[0], None, 0.0, 1, "anthropic", "x")
    small = RecentMemory(max_bytes=one.size * 2)
    for scope in ("a", "b", "c"):
        small.add((scope, None), one)
    assert ("a", None) not in small and ("c", None) in small and small.bytes <= small.max_bytes


def test_after_a_restart_the_session_is_rebuilt_from_stored_bodies(tmp_path):
    bodies = claude_code_turns(4)
    path = tmp_path / "c.db"
    run(path, [ex(b, i) for i, b in enumerate(bodies[:3])])
    db, fresh = run(path, [ex(bodies[3], 3)])  # a new writer (new capture epoch) and a new analyzer
    calls = rows(db)
    assert (calls[3]["relation"], calls[3]["epoch_reason"]) == ("EPOCH_START", "capture_resumed")
    assert calls[3]["predecessor"] == calls[2]["id"] and calls[3]["thread"] == calls[0]["thread"]
    assert calls[3]["relation_detail"]["shared_segments"] == len(canonicalize("anthropic.messages", bodies[2]).segments)
    assert [m["kind"] for m in calls[3]["markers"]] == ["tools_executed"]  # only the new tool result
    assert fresh.counter.misses == len(canonicalize("anthropic.messages", bodies[3]).segments)


def test_reindex_reproduces_the_live_analysis(tmp_path):
    path = tmp_path / "c.db"
    main = claude_code_turns(5, system=[text(long_text(1500), cache_control=dict(EPHEMERAL))])
    title = make_anthropic_body(system=[text("Write a title.")], messages=[user("Fix the bug.")])
    edited = json.loads(json.dumps(main[4]))
    edited["system"][0]["text"] += " More."
    exchanges = [
        ex(main[0], 0),
        ex(title, 1),
        ex(main[1], 2),
        ex(main[2], 3, session_label="labelled"),
        ex(main[3], 4),
        ex(edited, 5),
    ]
    db, _ = run(path, exchanges)
    live = snapshot(db)
    for call_id in live:  # wipe the analysis so reindex must recompute every column
        db.execute(
            "UPDATE calls SET relation = NULL, thread = NULL, markers = NULL, cache = NULL WHERE id = ?", [call_id]
        )
    db.conn.commit()
    assert len(list(reindex(db, batch=2))) == len(exchanges)
    assert snapshot(db) == live
    assert [live[e.id]["relation"] for e in exchanges] == [
        "EPOCH_START",
        "EPOCH_START",
        "APPEND_ONLY",
        "EPOCH_START",
        "APPEND_ONLY",
        "DIVERGED",
    ]
    assert live[exchanges[5].id]["pointer"] == "/system/0/text"


def test_reindex_of_one_session_leaves_the_others_alone(tmp_path):
    bodies = claude_code_turns(2)
    db, _ = run(
        tmp_path / "c.db",
        [ex(bodies[0], 0, session_label="a"), ex(bodies[1], 1, session_label="a"), ex(bodies[0], 2, session_label="b")],
    )
    db.execute("UPDATE calls SET relation = 'stale'")
    db.conn.commit()
    assert len(list(reindex(db, session="a"))) == 2
    assert [(r["session"], r["relation"]) for r in rows(db)] == [
        ("a", "EPOCH_START"),
        ("a", "APPEND_ONLY"),
        ("b", "stale"),
    ]


def test_explicit_session_ids_group_calls_and_number_them(tmp_path):
    body = make_anthropic_body(messages=[user("hi")])
    headers = lambda sid: (("content-type", "application/json"), ("x-claude-code-session-id", sid))  # noqa: E731
    exchanges = [
        ex(body, 0, request_headers=headers("A")),
        ex(body, 1, request_headers=headers("B")),
        ex(dict(body, prompt_cache_key="pck-1"), 2),
        ex(body, 3, request_headers=headers("A")),
        ex(body, 4),
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    got = [(r["session"], r["seq"], r["session_source"]) for r in rows(db)]
    assert got == [
        ("A", 1, "header:x-claude-code-session-id"),
        ("B", 1, "header:x-claude-code-session-id"),
        ("pck-1", 1, "prompt_cache_key"),
        ("A", 2, "header:x-claude-code-session-id"),
        (f"key:ffffffffffff:{rows(db)[4]['id']}", 1, "key"),
    ]
    assert rows(db)[3]["relation"] == "IDENTICAL" and rows(db)[3]["predecessor"] == exchanges[0].id


def test_failed_calls_are_analysed_but_never_predecessors_and_retries_link_in_their_session(tmp_path):
    bodies = claude_code_turns(2)
    headers = (("content-type", "application/json"), ("x-claude-code-session-id", "S"))
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}).encode()
    exchanges = [
        ex(bodies[0], 0, request_headers=headers),
        ex(bodies[1], 1, request_headers=headers, status=529, outcome="http_error", response_body=error),
        ex(bodies[1], 2, request_headers=headers),
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    first, failed, retry = rows(db)
    assert failed["relation"] == "APPEND_ONLY" and failed["predecessor"] == first["id"]
    assert failed["cache_verdict"] is None and failed["cache"] is None
    assert retry["predecessor"] == first["id"] and retry["relation"] == "APPEND_ONLY"
    assert (retry["attempt"], retry["retry_of"]) == (2, failed["id"])
    [marker] = [m for m in retry["markers"] if m["kind"] == "retry"]
    assert marker["detail"] == {"attempt": 2, "retry_of": failed["id"]}


def test_exchanges_that_are_not_llm_calls_get_no_thread(tmp_path):
    models = make_exchange(
        method="GET", path="/v1/models", request_body=b"", session_label=None, response=anthropic_response()
    )
    count = ex(
        make_anthropic_body(messages=[user("hi")]),
        1,
        path="/v1/messages/count_tokens",
        response_body=b'{"input_tokens": 3}',
    )
    after = ex(make_anthropic_body(messages=[user("hi"), assistant("yo"), user("more")]), 2)
    db, _ = run(tmp_path / "c.db", [models, count, after])
    m, c, a = rows(db)
    assert (m["relation"], m["thread"], m["cache_verdict"], m["tokens_estimated"]) == (
        "NOT_COMPARABLE",
        None,
        None,
        None,
    )
    assert c["thread"] == c["id"] and c["cache_verdict"] is None and c["tokens_estimated"] > 0
    # count_tokens is not its predecessor; the same client a moment later: a new thread of its session
    assert a["predecessor"] is None and a["epoch_reason"] == "thread_start" and a["session"] == c["session"]


def test_openai_chat_and_unparseable_bodies(tmp_path):
    chat = make_chat_body([{"role": "user", "content": "hi"}])
    longer = make_chat_body(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    )
    ok = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1",
        "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2},
    }
    common = {"provider": "openai", "path": "/v1/chat/completions", "response": ok}
    broken = make_exchange(session_label=None, request_body=b"{not json", started_at=T0 + 3, **common)
    db, _ = run(tmp_path / "c.db", [ex(chat, 0, **common), ex(longer, 1, **common), broken])
    _first, second, bad = rows(db)
    assert second["relation"] == "APPEND_ONLY" and second["cache_verdict"] == "below_minimum"
    assert bad["relation"] == "NOT_COMPARABLE" and bad["thread"] == bad["id"] and bad["tokens_estimated"] is None


def test_declared_markers_join_the_inferred_ones(tmp_path):
    annotations = (
        ("x-ctxscope-event", "compaction; tokens_before=90000; pointer=/messages/1"),
        ("x-ctxscope-event", json.dumps({"kind": "tool_output_externalised", "tool": "bash"})),
        ("x-ctxscope-other", "ignored"),
    )
    db, _ = run(tmp_path / "c.db", [ex(make_anthropic_body(messages=[user("hi")]), 0, annotations=annotations)])
    [call] = rows(db)
    assert call["markers"] == [
        {"kind": "compaction", "pointer": "/messages/1", "detail": {"tokens_before": 90000, "declared": True}},
        {"kind": "tool_output_externalised", "pointer": None, "detail": {"tool": "bash", "declared": True}},
    ]
    assert call["has_compaction_before"] is True


@pytest.mark.parametrize(
    "value, kind, pointer, detail",
    [
        ("compaction", "compaction", None, {}),
        ("reminder; name=todo; chars=120; flag", "reminder", None, {"name": "todo", "chars": 120, "flag": True}),
        ('{"kind": "guard", "pointer": "/messages/3", "level": 2}', "guard", "/messages/3", {"level": 2}),
        ('{"no": "kind"}', "annotation", None, {"raw": '{"no": "kind"}'}),
        ("{broken", "annotation", None, {"raw": "{broken"}),
    ],
)
def test_event_header_values(value, kind, pointer, detail):
    marker = parse_event(value)
    assert (marker.kind, marker.pointer, marker.detail) == (kind, pointer, {**detail, "declared": True})


def test_empty_event_values_are_ignored():
    assert parse_event("  ") is None


def test_the_providers_own_cache_diagnostics_are_kept_beside_ours(tmp_path):
    body = make_anthropic_body(messages=[user("hi")], diagnostics={"previous_message_id": "msg_prev"})
    reason = {"type": "system_changed", "cache_missed_input_tokens": 1200}
    response = dict(anthropic_response(), diagnostics={"cache_miss_reason": reason})
    db, _ = run(tmp_path / "c.db", [ex(body, 0, response=response)])
    [call] = rows(db)
    diag = call["cache"]["provider_diagnostics"]
    assert (diag["provider"], diag["comparison_id"], diag["reason"], diag["missed_tokens"]) == (
        "anthropic",
        "msg_prev",
        "system_changed",
        1200,
    )


def test_comma_joined_effects_become_separate_declared_markers():
    from ctxscope.inspector.pipeline.analysis_input import declared_markers

    markers = declared_markers(
        [
            ("x-ctxscope-event", "reminder; source=todo, guard_reminder; signal=no_progress; count=3"),
            ("x-ctxscope-event", '{"kind": "checkpoint", "rung": "hall, then hmid"}'),
        ]
    )
    assert [m.kind for m in markers] == ["reminder", "guard_reminder", "checkpoint"]
    assert markers[1].detail == {"signal": "no_progress", "count": 3, "declared": True}
    assert markers[2].detail["rung"] == "hall, then hmid"


def test_reindex_splits_old_captures_by_client_and_lineage(tmp_path):
    """Captures stored before the lineage rule sat in one session per API key; reindex gives each
    client's conversation its own session (docs/architecture.md, "Sessions and threads")."""
    script = claude_code_turns(2, first="What is 2+2?")
    agent = claude_code_turns(2, first="Fix the bug.")
    exchanges = [
        ex(script[0], 0, client="OpenAI/Python 1.99.0"),
        ex(agent[0], 1, client="pi/0.9 openai-js/6.26.0"),
        ex(script[1], 2, client="OpenAI/Python 1.99.0"),
        ex(agent[1], 3, client="pi/0.9 openai-js/6.26.0"),
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    live = [(r["session"], r["grouped_by"], r["seq"]) for r in rows(db)]
    db.execute("UPDATE calls SET session = 'key:ffffffffffff', grouped_by = NULL, seq = rowid, thread = NULL")
    db.conn.commit()
    assert len(list(reindex(db))) == 4
    got = rows(db)
    assert [(r["session"], r["grouped_by"]) for r in got] == [(s, g) for s, g, _ in live]
    assert got[0]["session"] == got[2]["session"] != got[1]["session"] == got[3]["session"]
    assert [r["grouped_by"] for r in got] == ["new", "new", "lineage", "lineage"]
    assert sorted(r["seq"] for r in got if r["session"] == got[0]["session"]) == [1, 2]


def _cut_stream() -> bytes:
    """An Anthropic stream that stops before message_stop: the client got half an answer."""
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_cut",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "usage": {"input_tokens": 5, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an"}},
        ),
    ]
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def test_a_retry_follows_a_failed_or_cut_off_call_never_a_completed_answer(tmp_path):
    """Without a session id: the same body again after a 529 or a cut stream is a retry in the failed
    call's session; after a complete answer it is a new request."""
    body = make_anthropic_body(messages=[user("Summarise the file.")])
    sse = (("content-type", "text/event-stream"),)
    exchanges = [
        ex(body, 0, status=529, outcome="http_error"),
        ex(body, 2),  # answered in full
        ex(body, 4),  # the script asks again: not a retry
        ex(dict(body, stream=True), 6, response_headers=sse, response_body=_cut_stream()),
        ex(dict(body, stream=True), 8),
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    got = rows(db)
    assert got[0]["response_complete"] is not False and got[3]["response_complete"] == 0
    assert [(r["attempt"], r["retry_of"]) for r in got] == [
        (1, None),
        (2, got[0]["id"]),
        (1, None),
        (1, None),
        (2, got[3]["id"]),
    ]
    retries = [[m["kind"] for m in r["markers"] if m["kind"] == "retry"] for r in got]
    assert retries == [[], ["retry"], [], [], ["retry"]]
    assert len({r["session"] for r in got}) == 1


def test_a_client_without_ids_gets_a_new_session_after_a_long_idle_gap(tmp_path):
    first = make_anthropic_body(system="You help.", messages=[user("Question one?")])
    soon = make_anthropic_body(system="You help.", messages=[user("Question two?")])
    later = make_anthropic_body(system="You help.", messages=[user("Question three?")])
    resumed = make_anthropic_body(system="You help.", messages=[user("Question one?"), assistant("One."), user("Why?")])
    exchanges = [ex(first, 0), ex(soon, 60), ex(later, 60 + 16 * 60), ex(resumed, 60 + 40 * 60)]
    db, _ = run(tmp_path / "c.db", exchanges)
    a, b, c, d = rows(db)
    assert [r["grouped_by"] for r in (a, b, c, d)] == ["new", "client_gap", "new", "new"]
    assert a["session"] == b["session"] != c["session"] != d["session"] != a["session"]
    assert (b["epoch_reason"], c["epoch_reason"]) == ("thread_start", "session_start")
    # resumed after 40 minutes: lineage holds only within the idle gap of the thread's latest call
    assert d["predecessor"] is None


def test_the_writers_call_input_has_every_field_and_equals_the_one_read_back(tmp_path):
    """``from_writer`` makes its CallInput without the dataclass's __init__: it must still set every
    field, and read the call as ``from_row`` reads it back from the store."""
    import dataclasses

    from ctxscope.inspector.pipeline.analysis_input import CallInput, from_row, from_writer
    from ctxscope.inspector.store import db as store
    from ctxscope.inspector.store.ingest import IngestState, ingest

    seen: list[CallInput] = []
    db = store.connect(tmp_path / "c.db")
    with db.atomic():
        ingest(
            db, make_exchange(1), IngestState(capture_epoch=1), [lambda db, call: seen.append(from_writer(db, call))]
        )
    [live] = seen
    assert set(vars(live)) == {f.name for f in dataclasses.fields(CallInput)}
    stored = from_row(db, live.id)
    db.close()
    assert dataclasses.replace(live, no_failed_twin=False) == stored
