"""What the analysis learns from reported usage: model minimums, Anthropic entries of earlier calls,
OpenAI's token prefix (docs/architecture.md, "Cache verdicts")."""

from __future__ import annotations

import copy

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.cache.memory import CacheMemory, Learned, prefix_keys
from ctxscope.inspector.analyses.cache.prediction import Observed, predict_cache
from ctxscope.inspector.analyses.cache.verdicts import judge_call
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.relation import CallContext, classify
from ctxscope.inspector.store.derived import cache_minimums
from ctxscope.inspector.store.queries import list_calls, open_db

from support.factories import analysed, anthropic_response, capture, exchange_at
from support.inspector_bodies import EPHEMERAL, assistant, long_text, make_anthropic_body, make_chat_body, text, user

A, CHAT = "anthropic.messages", "openai.chat"
COUNTER = TokenCounter()


def observe(body, t, api=A):
    prompt = canonicalize(api, body)
    return Observed(prompt, COUNTER.count_prompt(prompt), t)


def relation(prev, cur, api=A):
    before = CallContext(prev.prompt, "p", api, 0, None) if prev else None
    return classify(before, CallContext(cur.prompt, "p", api, 0, None))


def usage(total, read=0, write=0):
    return {"input": total, "output": 1, "cache_read": read, "cache_write": write}


def cached(t):
    return [text(t, cache_control=dict(EPHEMERAL))]


def test_a_write_below_the_table_lowers_the_minimum_from_that_call_on():
    memory = CacheMemory()
    body = make_anthropic_body(cached(long_text(700, "pi")), messages=[user("hi")], model="claude-sonnet-4-6")
    cur = observe(body, 100.0)
    before = predict_cache(None, cur, relation(None, cur))
    assert before.below_minimum and before.minimum == 2048  # the table alone
    pred, judged = judge_call(None, cur, relation(None, cur), usage(1420, write=1400), memory)
    assert pred.minimum < 1420 and not pred.below_minimum and judged.verdict == "expected_write"
    [learned] = memory.unsaved
    assert (learned.family, learned.model, learned.at) == ("anthropic", "claude-sonnet-4-6", 100.0)
    assert memory.minimum("anthropic", "claude-sonnet-4-6", 2048, 99.0) == 2048  # not before that call
    assert memory.minimum("anthropic", "claude-sonnet-4-6", 2048, 100.0) == learned.tokens
    assert memory.minimum("anthropic", "claude-opus-4-6", 4096, 200.0) == 4096  # other models keep the table


def test_nothing_is_learned_from_usage_the_table_allows_or_from_nothing_cached():
    memory = CacheMemory()
    cur = observe(make_anthropic_body(cached(long_text(1500)), messages=[user("hi")], model="claude-sonnet-4-6"), 1.0)
    for reported in (usage(3100, write=3000), usage(3100), None, {"input": None}):
        judge_call(None, cur, relation(None, cur), reported, memory)
    assert memory.unsaved == [] and memory.minimum("anthropic", "claude-sonnet-4-6", 2048, 2.0) == 2048


def test_learned_minimums_round_trip_through_the_store(tmp_path):
    db = open_db(tmp_path / "c.db")
    try:
        assert cache_minimums.load(db) == []
        cache_minimums.save(db, "anthropic", "claude-sonnet-4-6", 1300, 10.0, "call1")
        cache_minimums.save(db, "anthropic", "claude-sonnet-4-6", 1290, 10.0, "call1")  # reanalysed: replaced
        cache_minimums.save(db, "anthropic", "claude-sonnet-4-6", 1100, 20.0, "call2")
        rows = sorted(cache_minimums.load(db))
        assert rows == [("anthropic", "claude-sonnet-4-6", 1100, 20.0), ("anthropic", "claude-sonnet-4-6", 1290, 10.0)]
        memory = CacheMemory(Learned(*row) for row in rows)
        assert [memory.minimum("anthropic", "claude-sonnet-4-6", 2048, t) for t in (5, 15, 25)] == [2048, 1290, 1100]
    finally:
        db.conn.close()


def _older_entry_calls():
    doc = long_text(3000, "doc")
    system = [text("You read documents.")]
    call1 = make_anthropic_body(system, messages=[user(cached(doc))], model="claude-sim")
    call2 = make_anthropic_body(
        system, messages=[user(doc), assistant("Read."), user(cached("Part one."))], model="claude-sim"
    )
    call3 = make_anthropic_body(
        system, messages=[user(doc), assistant("Read."), user(cached("Part two."))], model="claude-sim"
    )
    return [observe(b, 100.0 + 10 * i) for i, b in enumerate((call1, call2, call3))]


def test_anthropic_reads_an_entry_an_older_call_wrote():
    first, second, third = _older_entry_calls()
    alone = predict_cache(second, third, relation(second, third))
    assert alone.predicted_read == 0  # the predecessor's only entry lies past the change
    memory = CacheMemory()
    judge_call(None, first, relation(None, first), usage(6100, write=6050), memory, scope="k")
    judge_call(first, second, relation(first, second), usage(6110, read=6050, write=10), memory, scope="k")
    pred = predict_cache(second, third, relation(second, third), memory=memory, scope="k")
    doc_end = third.tokens.cumulative[1]  # system, then the document
    assert pred.predicted_read == doc_end and pred.client_loss == second.tokens.total - doc_end
    other_key = predict_cache(second, third, relation(second, third), memory=memory, scope="another key")
    assert other_key.predicted_read == 0  # entries belong to the API key that wrote them


def test_anthropic_entries_expire_and_need_a_reported_cache():
    first, second, third = _older_entry_calls()
    memory = CacheMemory()
    judge_call(None, first, relation(None, first), usage(6100), memory, scope="k")  # the provider cached nothing
    assert predict_cache(second, third, relation(second, third), memory=memory, scope="k").predicted_read == 0
    judge_call(None, first, relation(None, first), usage(6100, write=6050), memory, scope="k")
    late = third._replace(started_at=first.started_at + 301)  # past the 5-minute TTL
    assert predict_cache(second, late, relation(second, late), memory=memory, scope="k").predicted_read == 0


def test_prefix_keys_depend_on_model_and_message_parameters():
    body = make_anthropic_body([text("sys")], messages=[user("a"), assistant("b"), user("c")])
    prompt = canonicalize(A, body)
    keys = prefix_keys(prompt, [0, 2])
    other_model = prefix_keys(canonicalize(A, {**body, "model": "claude-opus-4-6"}), [0, 2])
    forced = prefix_keys(canonicalize(A, {**body, "tool_choice": {"type": "any"}}), [0, 2])
    assert keys[0] != other_model[0] and keys[2] != other_model[2]
    assert keys[0] == forced[0] and keys[2] != forced[2]  # system survives a tool_choice change, messages do not


def test_openai_predicts_the_common_token_prefix_of_an_edited_message():
    doc = long_text(3000, "doc")
    prev = observe(
        make_chat_body([{"role": "system", "content": "Review."}, {"role": "user", "content": doc}]), 1.0, CHAT
    )
    body = make_chat_body([{"role": "system", "content": "Review."}, {"role": "user", "content": doc[:-30] + " fix"}])
    cur = observe(body, 2.0, CHAT)
    pred = predict_cache(prev, cur, relation(prev, cur, CHAT))
    # The minimum and whole 128-token steps, up to within a step (and the few edited tokens) of the end.
    assert (pred.predicted_read - 1024) % 128 == 0 and prev.tokens.total - 128 - 20 <= pred.predicted_read
    assert pred.predicted_read <= prev.tokens.total
    early = copy.deepcopy(body)
    early["messages"][1]["content"] = "x " + doc
    moved = observe(early, 2.0, CHAT)
    assert predict_cache(prev, moved, relation(prev, moved, CHAT)).predicted_read == 0


def _pi_like_call(t: float):
    body = make_anthropic_body(cached(long_text(700, "pi")), messages=[user("hi")], model="claude-sonnet-4-6")
    usage = {"input_tokens": 20, "output_tokens": 3, "cache_creation_input_tokens": 1400}
    return exchange_at(body, t, response=anthropic_response(usage=usage))


def test_the_writer_stores_what_it_learned_and_a_store_failure_costs_only_that(tmp_path, caplog):
    db, _ = analysed(tmp_path / "ok.db", [_pi_like_call(0)])
    try:
        [(family, model, tokens, _at)] = cache_minimums.load(db)
        assert (family, model) == ("anthropic", "claude-sonnet-4-6") and tokens < 2048
    finally:
        db.conn.close()
    broken = tmp_path / "broken.db"
    capture(broken, []).conn.close()
    raw = open_db(broken)
    raw.execute("DROP TABLE cache_minimums")
    raw.conn.commit()
    raw.conn.close()
    db, _ = analysed(broken, [_pi_like_call(0)])  # asserts that no analysis failed
    try:
        [row] = list_calls(db, limit=None)
        assert row["cache_verdict"] == "expected_write" and row["cache"]["minimum"] < 2048
    finally:
        db.conn.close()
    assert "could not store a learned cache minimum" in caplog.text
