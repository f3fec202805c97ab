"""Cache predictions that follow what the provider reports, on real SDK traffic (docs/architecture.md,
"Cache verdicts").

The real openai/anthropic SDKs talk to the real daemon, which forwards to the simulator (the
provider stand-in); the writer's analysis is read back from the call rows. Three crafted cases: an
edit near the end of a long message (OpenAI caches the token prefix up to it), a read of an entry
an older call wrote (not the predecessor), and a first call whose write is below the published
minimum (the analysis learns the model's minimum, and reindex keeps it).
"""

from __future__ import annotations

import copy

import pytest

from ctxscope.inspector.pipeline.reindex import reindex
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.derived import cache_minimums

from support import sdk_clients
from support.inspector_bodies import EPHEMERAL, assistant, long_text, make_anthropic_body, text, user

KEY = "sk-test-cacheprediction-0123456789ab"


@pytest.fixture(autouse=True)
def _analysis_never_fails(proxy):
    yield
    stats_now = proxy.daemon.writer.stats()
    assert stats_now.analysis_failed == 0 and stats_now.failed == 0, stats_now.last_error


def _expected(row: dict) -> int:
    """The predicted read in the provider's units, as the verdict compared it with the reported one."""
    return row["cache"]["expected_read"]


def test_openai_edit_near_the_end_of_a_long_message_reads_the_token_prefix(proxy, sim):
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    document = long_text(4500, "doc")
    # The edit lies behind a shared system prompt and first user turn, so the two calls are one
    # conversation (docs/architecture.md, "Sessions and threads") and the second is DIVERGED.
    first = [
        {"role": "system", "content": "You review documents."},
        {"role": "user", "content": "Review this:"},
        {"role": "assistant", "content": "Send it."},
        {"role": "user", "content": document},
    ]
    client.chat.completions.create(model="gpt-4.1", messages=first)
    edited = copy.deepcopy(first)
    edited[3]["content"] = document[:-40] + " and one correction at the very end"
    client.chat.completions.create(model="gpt-4.1", messages=edited)
    rows = proxy.wait_for_calls(2)
    read = rows[1]["usage"]["cache_read"]
    assert read > 8000  # ~9,000 tokens: the provider read the token prefix up to the edit
    assert rows[1]["relation"] == "DIVERGED" and rows[1]["pointer"] == "/messages/3/content"
    assert abs(_expected(rows[1]) - read) <= 128  # within one of the provider's 128-token steps
    # The edit cost what lay after it: at most a step or two, not the whole message.
    assert rows[1]["cache_verdict"] in ("client_break", "hit") and rows[1]["cache"]["lost_tokens"] <= 256


def test_anthropic_reads_an_entry_an_older_call_wrote(proxy, sim):
    """Call 1 caches up to its long first message; call 2 moves the only marker to its last message
    (so its own breakpoints hold no entry at the first message); call 3 replaces that last message.
    Its predecessor (call 2) wrote nothing call 3 can read, but call 1's entry is alive and within
    the lookback: the provider reads it."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    model = "claude-sim"  # 1024 minimum in both tables
    system = [text("You are a careful reader.")]
    doc = long_text(4500, "doc")
    call1 = make_anthropic_body(system, messages=[user([text(doc, cache_control=dict(EPHEMERAL))])], model=model)
    call2 = make_anthropic_body(
        system,
        messages=[user(doc), assistant("Read it."), user([text("Summarise part one.", cache_control=dict(EPHEMERAL))])],
        model=model,
    )
    call3 = make_anthropic_body(
        system,
        messages=[user(doc), assistant("Read it."), user([text("Summarise part two.", cache_control=dict(EPHEMERAL))])],
        model=model,
    )
    for body in (call1, call2, call3):
        client.messages.create(**copy.deepcopy(body))
    rows = proxy.wait_for_calls(3)
    third = rows[2]
    assert third["usage"]["cache_read"] > 8000 and third["relation"] == "DIVERGED"
    assert third["predecessor"] == rows[1]["id"]
    assert abs(_expected(third) - third["usage"]["cache_read"]) <= third["usage"]["cache_read"] // 50
    # What it lost is only call 2's entry beyond the document: the few tokens of its last turn.
    assert third["cache_verdict"] == "client_break" and 0 < third["cache"]["lost_tokens"] < 50


def test_a_write_below_the_table_teaches_the_model_minimum(proxy, sim):
    """A pi-like first call: a ~1,400-token system prompt on a model whose table minimum is 2,048,
    and a provider that caches it anyway."""
    sim.state().cache.minimums = {"sonnet-4-6": 1024}
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    model = "claude-sonnet-4-6"
    system = [text(long_text(700, "pi"), cache_control=dict(EPHEMERAL))]
    first = make_anthropic_body(system, messages=[user("hi")], model=model)
    second = make_anthropic_body(
        system, messages=[user("hi"), assistant("Hello."), user("list the files")], model=model
    )
    client.messages.create(**copy.deepcopy(first))
    client.messages.create(**copy.deepcopy(second))
    rows = proxy.wait_for_calls(2)
    assert rows[0]["usage"]["cache_write"] > 1024 and rows[0]["cache_verdict"] == "expected_write"
    assert rows[0]["cache"]["minimum"] < 2048  # learned from the call's own usage
    assert rows[1]["usage"]["cache_read"] == rows[0]["usage"]["cache_write"]
    assert rows[1]["cache_verdict"] == "hit"
    assert abs(_expected(rows[1]) - rows[1]["usage"]["cache_read"]) <= 30
    proxy.stop()  # the writer is done; reindex with a fresh analyzer starts from the stored minimum
    db = queries.open_db(proxy.db_path)
    try:
        [(family, learned_model, tokens, _at)] = cache_minimums.load(db)
        assert (family, learned_model) == ("anthropic", model) and tokens < 2048
        before = [(r["cache_verdict"], r["cache"]) for r in queries.list_calls(db, limit=None, newest_first=False)]
        assert len(list(reindex(db))) == 2
        after = [(r["cache_verdict"], r["cache"]) for r in queries.list_calls(db, limit=None, newest_first=False)]
        assert after == before
    finally:
        db.conn.close()
