"""``previous_response_id`` chains through the real writer and analyzer: each link is compared and
counted on the full prompt the provider holds (earlier input, its output, the new input)."""

from __future__ import annotations

import json

from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.store import queries

from support.factories import analysed as run
from support.factories import exchange_at as ex
from support.inspector_bodies import long_text


def answer(n: int, words: int) -> dict:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "model": "gpt-5.4",
        "output": [
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": long_text(words, f"answer{n}"), "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 100 * (n + 1), "output_tokens": words, "input_tokens_details": {"cached_tokens": 0}},
    }


def chain(n: int) -> list:
    bodies = [{"model": "gpt-5.4", "instructions": "You are terse.", "input": "Rivers? " + long_text(300)}]
    for i in range(1, n):
        bodies.append(
            {
                "model": "gpt-5.4",
                "instructions": "You are terse.",
                "previous_response_id": f"resp_{i - 1}",
                "input": [{"role": "user", "content": f"And then {i}?"}],
            }
        )
    return [
        ex(
            body,
            5 * i,
            provider="openai",
            upstream="https://api.openai.com",
            path="/v1/responses",
            response_body=json.dumps(answer(i, 200 + 50 * i)).encode(),
        )
        for i, body in enumerate(bodies)
    ]


def rows(db):
    return [queries.get_call(db, r["id"]) for r in queries.list_calls(db, limit=None, newest_first=False)]


def test_a_three_link_chain_is_append_only_with_whole_context_tokens(tmp_path):
    db, _ = run(tmp_path / "c.db", chain(3))
    first, second, third = rows(db)
    assert [r["relation"] for r in (first, second, third)] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert (second["predecessor"], third["predecessor"]) == (first["id"], second["id"])
    assert len({r["thread"] for r in (first, second, third)}) == 1
    # the whole context: the first input (~300 tokens) and both answers (~250 and ~300) are counted
    assert second["tokens_estimated"] > first["tokens_estimated"] + 250
    assert third["tokens_estimated"] > second["tokens_estimated"] + 300 > 850


def test_a_cold_start_rebuilds_the_chain_from_the_store(tmp_path):
    run(tmp_path / "c.db", chain(3)[:2])
    db, _ = run(tmp_path / "c.db", chain(3)[2:], Analyzer())  # a fresh analyzer: nothing in memory
    _first, second, third = rows(db)
    # a new writer is a capture restart (an epoch), but the whole of the second call's full prompt
    # (instructions, first input, first answer, second input) is this one's prefix
    assert (third["relation"], third["epoch_reason"]) == ("EPOCH_START", "capture_resumed")
    assert third["predecessor"] == second["id"] and third["relation_detail"]["shared_segments"] == 4
    assert third["tokens_estimated"] > 850


def test_a_link_to_a_response_never_captured_stays_not_comparable(tmp_path):
    orphan = chain(2)[1:]
    db, _ = run(tmp_path / "c.db", orphan)
    [only] = rows(db)
    assert only["relation"] == "NOT_COMPARABLE"
