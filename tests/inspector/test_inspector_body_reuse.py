"""A body parsed and hashed against a recent one, and a writer that reuses its recent bodies, give
exactly what a computation from scratch gives: the same value, digest, analysis and search index."""

from __future__ import annotations

import copy
import hashlib
import json
import random

import pytest

from ctxscope.inspector.analyses import incremental
from ctxscope.inspector.base import body_reuse
from ctxscope.inspector.base.body_reuse import CHECKPOINT, BodyMemory, parse
from ctxscope.inspector.pipeline import analyze, search_index
from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.store import exchange_row
from ctxscope.inspector.writer.storing.thread import CaptureWriter

from support.factories import T0, analysis_and_index, make_exchange
from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    chat_tool,
    claude_code_turns,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    text,
    user,
)

ANALYSIS = (
    "session",
    "seq",
    "session_source",
    "grouped_by",
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
    "request_sha256",
    "request_json_ok",
    "model",
    "stream",
)


def outcome(raw: bytes):
    try:
        return "ok", json.dumps(json.loads(raw))
    except (ValueError, RecursionError) as e:
        return "error", type(e).__name__


def parsed_chain(bodies: list[bytes]) -> list[int]:
    """Parse each body against the ones before it; each must equal json.loads and sha256 from scratch."""
    memory, reused = BodyMemory(), []
    for raw in bodies:
        try:
            value, found = parse(raw, memory.get("s"))
            got = ("ok", json.dumps(value))
        except (ValueError, RecursionError) as e:
            got, found = ("error", type(e).__name__), None
        assert got == outcome(raw), raw[:200]
        if found is not None:
            assert found.digest == hashlib.sha256(raw).hexdigest()
            assert list(found.value) == list(json.loads(raw))  # the members' order too
            memory.add("s", found)
        reused.append(found.reused if found is not None else -1)
    return reused


def test_an_agent_loop_reuses_its_history_and_parses_the_same_values():
    raws = [json.dumps(b).encode() for b in claude_code_turns(8, reminders=(3, 5))]
    reused = parsed_chain(raws)
    assert reused[0] == 0 and all(n > 0 for n in reused[1:])  # system and tools came from the body before


@pytest.mark.parametrize("dump", [{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": False}])
def test_edits_compaction_reordered_keys_and_numbers_at_a_boundary(dump):
    base = claude_code_turns(6)
    edited = copy.deepcopy(base[5])
    edited["messages"][2]["content"][0]["text"] = "Step 1: réading again 日本."
    compacted = make_anthropic_body(base[5]["system"], base[5]["tools"], [user("Summary of the work so far.")])
    reordered = {k: base[5][k] for k in reversed(list(base[5]))}
    longer = dict(base[5], max_tokens=base[5]["max_tokens"] * 10 + 1)  # "1024" -> "10241": its prefix is shared
    fewer_tools = dict(base[5], tools=base[5]["tools"][:1])
    bodies = [*base, edited, base[5], compacted, reordered, base[5], longer, fewer_tools, base[5]]
    parsed_chain([json.dumps(b, **dump).encode() for b in bodies])


def test_messages_moved_by_a_longer_system_prompt_are_reused_where_they_now_start():
    bodies = claude_code_turns(5)
    moved = dict(bodies[4], system=bodies[4]["system"] + [text("Today is Tuesday.")])  # before the messages
    first, second = json.dumps(bodies[3]).encode(), json.dumps(moved).encode()
    _, a = parse(first)
    value, b = parse(second, [a])
    assert value == json.loads(second) and b is not None and a is not None
    assert b.value["messages"][0] is a.value["messages"][0]  # the same objects: not parsed again
    assert b.member("messages").start != a.member("messages").start
    parsed_chain([first, second, json.dumps(bodies[4]).encode(), first])


def test_what_the_fast_path_leaves_to_json_loads():
    good = json.dumps(make_anthropic_body(messages=[user("hi"), assistant([text("yo")])])).encode()
    bodies = [
        good,
        good + b" x",  # extra data
        good[:-1],  # cut short
        good.replace(b'"model"', b'"system"', 1),  # a repeated top-level name: json.loads keeps the last
        b"\xef\xbb\xbf" + good,  # a byte-order mark
        b'  {"a": 1}',  # leading whitespace
        b"[1, 2]",
        good.replace(b"hi", b"h\xffi"),  # not UTF-8
        good.replace(b"hi", b"\\ud800"),  # a lone surrogate, escaped
        good.replace(b'"hi"', b'"h\xed\xa0\x80i"'),  # a lone surrogate, raw (json.loads takes it)
        good.replace(b'"yo"', b"NaN"),
        b"{}",
        b"{" + b'"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # too deep for the decoder
        good,
    ]
    parsed_chain(bodies)


def test_random_histories_parse_as_json_loads_does():
    rng = random.Random(7)
    words = ["plain", "héllo", "日本", 'q"uote', "tab\t", "1", ""]
    for _ in range(300):
        messages: list = []
        head: dict = {"model": "m", "n": rng.choice([1, 12, 1.5, True, None])}
        dump = {"ensure_ascii": rng.random() < 0.5, "indent": rng.choice([None, 1])}
        raws = []
        for _step in range(6):
            body = {**head, "messages": list(messages)}
            if rng.random() < 0.3:
                body = {"messages": body.pop("messages"), **body}
            raws.append(json.dumps(body, **dump).encode())
            r = rng.random()
            if r < 0.5 or not messages:
                messages.append(user([text(rng.choice(words) * rng.randint(1, 3))]))
            elif r < 0.7:
                messages[rng.randrange(len(messages))] = assistant([text("changed")])
            elif r < 0.8:
                messages.pop(rng.randrange(len(messages)))
            else:
                head["n"] = rng.choice([1, 12, 123])
        parsed_chain(raws)


@pytest.mark.parametrize("tail", [b"12345", b"-1.5e3", b"true", b"null", b'"h\xc3\xa9llo"', b"[1, 2]", b"{}"])
def test_values_across_the_end_of_a_parsing_window(tail):
    """Values are read from windows of CHECKPOINT bytes: a value or a run of blanks across a
    window's end, first parsed or after reused bytes, reads as json.loads reads it."""
    for shift in range(-8, 9):
        pad = b"x" * (CHECKPOINT - 12 + shift)
        first = b'{"a": "' + pad + b'", "n": ' + tail + b"  ,\n   " + b'"m": [' + tail + b", " + tail + b"]}"
        second = first[:-2] + b", 7]}"  # the same, one more item: the first items are reused
        third = b'{"a": "' + pad + b'", "n":' + b" " * 40 + tail + b"}"
        parsed_chain([first, second, third, first])


@pytest.mark.slow
def test_common_prefix_finds_the_first_difference_in_any_window():
    data = bytes(random.Random(3).randrange(256) for _ in range(3 * CHECKPOINT + 100))
    for at in (0, 1, 63, 64, 65, CHECKPOINT - 1, CHECKPOINT, CHECKPOINT + 1, 2 * CHECKPOINT + 7, len(data) - 1):
        other = data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
        assert body_reuse.common_prefix(data, other) == at
    assert body_reuse.common_prefix(data, data[:CHECKPOINT]) == CHECKPOINT
    assert body_reuse.common_prefix(data, data) == len(data) and body_reuse.common_prefix(b"", data) == 0


def test_the_digest_resumes_from_a_checkpoint_inside_the_shared_prefix():
    history = [user([text(f"message {i} " + "x" * 4000)]) for i in range(100)]  # ~400 KB: several checkpoints
    first = json.dumps(make_anthropic_body(messages=history)).encode()
    second = json.dumps(make_anthropic_body(messages=history + [user("one more")])).encode()
    _, a = parse(first)
    _, b = parse(second, [a])
    assert a is not None and b is not None and len(a.states) == len(first) // CHECKPOINT + 1
    assert b.digest == hashlib.sha256(second).hexdigest()
    assert b.states[: len(a.states) - 1] == a.states[: len(a.states) - 1]  # the very states: not hashed again
    assert b.value["messages"][0] is a.value["messages"][0]  # the items are shared, not parsed again


def test_body_memory_is_bounded_and_drops_bodies_the_latest_continues():
    memory = BodyMemory(per_key=2, max_keys=2, max_bytes=10_000)
    raws = [json.dumps(b).encode() for b in claude_code_turns(4)]
    for raw in raws:
        memory.add("a", parse(raw, memory.get("a"))[1])
    assert [b.raw for b in memory.get("a")] == [raws[-1]]  # each one continued the one before
    # Claude Code sends the messages first, then the system prompt and the tools (arrays too).
    first = [json.dumps({"messages": b["messages"], **b}).encode() for b in claude_code_turns(4)]
    for raw in first:
        memory.add("first", parse(raw, memory.get("first"))[1])
    assert [b.raw for b in memory.get("first")] == [first[-1]]
    other = json.dumps(make_anthropic_body(messages=[user("another conversation"), user("x")])).encode()
    memory.add("a", parse(other)[1])
    assert len(memory.get("a")) == 2
    memory.add("b", parse(other)[1])
    memory.add("c", parse(other)[1])
    assert memory.get("a") == [] and memory.bytes <= 10_000


# -- the writer: incremental against from scratch -------------------------------------------------

GEMINI_RESPONSE = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 1, "cachedContentTokenCount": 10},
}
CHAT_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4.1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}},
}
RESPONSES_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-5",
    "status": "completed",
    "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
    "usage": {"input_tokens": 40, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 0}},
}


def traffic() -> list:
    """Crafted calls of every API: appends, an edit in the middle, compaction, tools changed,
    reordered keys, a number changed at a byte boundary, non-JSON and cut-short bodies."""
    out = []
    t = [0.0]

    def call(body, **kw):
        raw = body if isinstance(body, bytes) else json.dumps(body, **kw.pop("dump", {})).encode()
        t[0] += 7.0
        kw.setdefault("session_label", None)
        out.append(make_exchange(request_body=raw, started_at=T0 + t[0], **kw))

    main = claude_code_turns(8, reminders=(2, 6))
    for body in main[:5]:
        call(body)
    edited = copy.deepcopy(main[5])
    edited["messages"][3]["content"][0]["text"] = "Step 1: reading, édited."
    call(edited)
    call(main[6])
    call(dict(main[7], tools=main[7]["tools"] + [{"name": "grep", "description": "Grep.", "input_schema": {}}]))
    call({k: main[7][k] for k in reversed(list(main[7]))})
    call(dict(main[7], max_tokens=main[7]["max_tokens"] * 10 + 1))
    compacted = make_anthropic_body(
        main[7]["system"], main[7]["tools"], [user([text("Summary: the bug is fixed.", cache_control=dict(EPHEMERAL))])]
    )
    call(compacted)
    call(
        make_anthropic_body(
            main[7]["system"],
            main[7]["tools"],
            [*compacted["messages"], assistant("Done."), user("Thanks, now the tests.")],
        )
    )
    call(b"this is not json")
    call(json.dumps(main[7]).encode()[:-3])
    call(main[7], dump={"indent": 1})

    # The marker moves off the last block, a few bytes before the end of its message.
    moving: list = [user([text("Read the repo.")])]
    for i in range(4):
        for message in moving:
            message["content"][-1].pop("cache_control", None)
        moving[-1]["content"][-1]["cache_control"] = dict(EPHEMERAL)
        call(make_anthropic_body(main[0]["system"], main[0]["tools"], copy.deepcopy(moving)), client="moving/1")
        moving += [assistant([text(f"Reading {i}.")]), user([text(f"Contents {i}.")])]

    chat = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Fix it."}]
    for i in range(4):
        call(
            make_chat_body(list(chat), tools=[chat_tool("read")]),
            provider="openai",
            path="/v1/chat/completions",
            client="chat-agent/1",
            response_body=json.dumps(CHAT_RESPONSE).encode(),
        )
        chat += [{"role": "assistant", "content": f"Step {i} 日本"}, {"role": "user", "content": f"More {i}."}]
    items: list = [{"role": "user", "content": "Fix it."}]
    for i in range(4):
        call(
            make_responses_body(list(items), instructions="Be terse."),
            provider="openai",
            path="/v1/responses",
            client="responses-agent/1",
            response_body=json.dumps(RESPONSES_RESPONSE).encode(),
        )
        items += [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"s{i}"}]},
            {"type": "message", "role": "user", "content": f"go on {i}"},
        ]
    contents: list = [{"role": "user", "parts": [{"text": "Fix it."}]}]
    for i in range(4):
        call(
            {"systemInstruction": {"parts": [{"text": "Be terse."}]}, "contents": list(contents)},
            provider="u/gemini",
            path="/v1beta/models/gemini-2.5-pro:generateContent",
            client="gemini-agent/1",
            response_body=json.dumps(GEMINI_RESPONSE).encode(),
        )
        contents += [{"role": "model", "parts": [{"text": f"step {i}"}]}, {"role": "user", "parts": [{"text": "ok"}]}]
    return out


def same_body(db, call: dict) -> None:
    """An analyzer that fails (and is counted) when the body the analyzers got is not json.loads's."""
    raw = call["_request_body"]
    if outcome(raw)[0] == "ok" and json.dumps(call["_request_json"]) != json.dumps(json.loads(raw)):
        raise AssertionError(f"call {call['id']} was given another body than json.loads gives")


def stored(path, exchanges) -> tuple[dict, list]:
    writer = CaptureWriter(path, analyzers=[*writer_analyzers(), same_body], status_file=False)
    writer.start()
    for ex in exchanges:
        writer.submit(ex)
    assert writer.stop()
    stats = writer.stats()
    assert stats.failed == 0 and stats.analysis_failed == 0, stats.last_error
    calls, index = analysis_and_index(path, ANALYSIS)
    assert set(calls) == {ex.id for ex in exchanges}
    return calls, index


def test_the_writer_reusing_recent_bodies_stores_what_a_computation_from_scratch_stores(tmp_path, monkeypatch):
    exchanges = traffic()
    reused = stored(tmp_path / "reused.db", exchanges)

    # From scratch: every body parsed and hashed whole, every prompt canonicalised and counted whole.
    monkeypatch.setattr(exchange_row, "parse", lambda raw, candidates=(): body_reuse.parse(raw, ()))
    monkeypatch.setattr(
        analyze, "prepare", lambda api, body, raw, candidates, **kw: incremental.prepare(api, body, raw, [])
    )
    monkeypatch.setattr(search_index, "prepare", lambda api, body, raw, c: incremental.prepare(api, body, raw, []))
    scratch = stored(tmp_path / "scratch.db", exchanges)

    assert reused[0] == scratch[0]
    assert reused[1] == scratch[1]
    # The traffic reaches what the comparison is about.
    calls = list(reused[0].values())
    assert {"APPEND_ONLY", "IDENTICAL", "DIVERGED", "EPOCH_START", "NOT_COMPARABLE"} <= {c["relation"] for c in calls}
    assert "/messages/3/content/0/text" in {c["pointer"] for c in calls}  # refined inside a segment
    assert {"hit", "below_minimum", "client_break"} <= {c["cache_verdict"] for c in calls}
    assert {"tools_executed", "reminder", "compaction"} <= {m["kind"] for c in calls for m in c["markers"] or ()}
    assert [c["request_json_ok"] for c in calls].count(0) == 2 and reused[1]


def test_common_prefix_answers_again_only_for_the_same_two_bodies():
    """The writer asks it twice per call of the same two bodies; the memo must never answer for others."""
    base = b"x" * (body_reuse.MEMO_MIN * 2)
    longer = base + b"y"
    other = base[:100] + b"z" + base[101:]
    assert body_reuse.common_prefix(base, longer) == len(base)
    assert body_reuse.common_prefix(base, other) == 100  # same length, other bytes
    assert body_reuse.common_prefix(base, bytes(longer)) == len(base)  # equal bytes, another object
    mutable = bytearray(longer)
    assert body_reuse.common_prefix(base, mutable) == len(base)
    mutable[5] = 0
    assert body_reuse.common_prefix(base, mutable) == 5  # a mutable body is never remembered
    body_reuse.common_prefix(base, longer)
    body_reuse.forget_last()
    assert body_reuse._last is None  # what the store calls once a call is stored: it holds neither body


def test_no_body_outlives_its_call_in_the_common_prefix_memo(tmp_path):
    from ctxscope.inspector.store import db as store
    from ctxscope.inspector.store.ingest import IngestState, ingest

    handle = store.open_handle(tmp_path / "m.db")
    state = IngestState(capture_epoch=1)
    big = [{"role": "user", "content": "x" * (2 * body_reuse.MEMO_MIN)}]
    for k in range(2):
        request = {"model": "m", "max_tokens": 9, "messages": big + [{"role": "user", "content": str(k)}]}
        ingest(handle, make_exchange(request=request), state)
    assert body_reuse._last is None
    handle.close()
