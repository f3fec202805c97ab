"""A cache verdict never contradicts the usage the provider reported (docs/architecture.md, "Cache verdicts").

Property-style: every combination of prediction features the analysis produces, crossed with a
grid of reported usages, gets a verdict that ``contradiction`` accepts; and ``contradiction``
itself rejects each kind of contradiction.
"""

from __future__ import annotations

import itertools

import pytest

from ctxscope.inspector.analyses.cache.prediction import CachePrediction
from ctxscope.inspector.analyses.cache.verdicts import CacheJudgement, contradiction, expected_read, verdict
from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.inspector.analyses.relation import Relation
from ctxscope.vocab.kinds import CacheVerdict, RelationKind

PRICE = load_prices().lookup("claude-sonnet-4-5")
TOTAL = 4000  # the prediction's estimate of the prompt


def prediction(family, reason, read, would, loss, ttl_expired, below, last_bp) -> CachePrediction:
    return CachePrediction(
        family=family,
        reason=reason,
        predicted_read=read,
        predicted_write=max(0, TOTAL - read),
        cacheable_prefix_tokens=0 if below else TOTAL,
        total_tokens=TOTAL,
        minimum=2048,
        below_minimum=below,
        last_breakpoint_index=last_bp,
        prev_last_breakpoint_index=last_bp,
        gap_seconds=30.0,
        ttl_expired=ttl_expired,
        would_read=max(read, would),
        client_loss=loss,
        break_index=None,
        break_pointer=None,
        break_kind="model" if reason == "model_change" else None,
        before_prev_last_breakpoint=None,
        ttl="5m",
        unrounded_read=read + 100 if family == "openai" and read else None,  # rounded again in provider units
    )


PREDICTIONS = [
    prediction(*combo)
    for combo in itertools.product(
        ("anthropic", "openai", "unknown"),
        ("first_call", "no_breakpoints", "diverged", "model_change", "prefix_reused", "ttl_expired", "older_entry"),
        (0, 1024, 3000),  # predicted read
        (0, 3000, 3900),  # would read had nothing expired
        (0, 500, 3000),  # client loss
        (False, True),  # ttl expired
        (False, True),  # below minimum
        (None, 3),  # last breakpoint
    )
]
USAGES = [None, {"input": None, "output": 3}] + [
    {"input": total, "output": 5, "cache_read": read, "cache_write": write}
    for total, read, write in itertools.product((0, 1365, 4000, 9000), (0, 1, 1024, 1365, 2900, 4000), (0, 1, 1365))
    if read + write <= total
]
RELATIONS = [
    Relation(RelationKind.APPEND_ONLY),
    Relation(RelationKind.DIVERGED, pointer="/messages/1/content"),
    Relation(RelationKind.NOT_COMPARABLE, detail="server-side prefix"),
    Relation(RelationKind.EPOCH_START),
]


@pytest.mark.slow
def test_no_verdict_contradicts_reported_usage():
    checked, seen = 0, set()
    for pred, usage, rel in itertools.product(PREDICTIONS, USAGES, RELATIONS):
        judged = verdict(pred, usage, rel, price=PRICE)
        why = contradiction(judged, usage, expected_read(pred, usage))
        assert why is None, (why, pred, usage, rel.kind)
        checked += 1
        seen.add(judged.verdict)
    assert checked == len(PREDICTIONS) * len(USAGES) * len(RELATIONS) > 100_000
    assert seen == set(CacheVerdict)  # the grid reaches every verdict: none is exempt from the rule


def judgement(kind, lost=0) -> CacheJudgement:
    return CacheJudgement(kind, lost, None, None, None, None, None)


def usage(total, read=0, write=0):
    return {"input": total, "output": 1, "cache_read": read, "cache_write": write}


@pytest.mark.parametrize(
    ("kind", "lost", "reported", "expected", "fragment"),
    [
        (CacheVerdict.BELOW_MINIMUM, 0, usage(1400, write=1365), 0, "below_minimum but"),  # pi's first call
        (CacheVerdict.NOT_REQUESTED, 0, usage(1400, read=1365), 0, "not_requested but"),
        (CacheVerdict.CLIENT_BREAK, 900, usage(9000, read=4000), 0, "where none was predicted"),
        (CacheVerdict.TTL_EXPIRED, 900, usage(9000, read=4000), 0, "where none was predicted"),
        (CacheVerdict.PROVIDER_MISS, 100, usage(9000, read=8894), 4644, "provider_miss but"),
        (CacheVerdict.CLIENT_BREAK, 0, usage(9000), 0, "no tokens lost"),
        (CacheVerdict.HIT, 0, usage(9000), 0, "hit without"),
        (CacheVerdict.EXPECTED_WRITE, 0, usage(9000, read=10), 0, "expected_write but"),
        (CacheVerdict.HIT, 5, usage(9000, read=10), 10, "tokens lost"),
        (CacheVerdict.HIT, 0, None, 0, "without reported usage"),
    ],
)
def test_each_kind_of_contradiction_is_named(kind, lost, reported, expected, fragment):
    why = contradiction(judgement(kind, lost), reported, expected)
    assert why is not None and fragment in why


@pytest.mark.parametrize(
    ("kind", "lost", "reported", "expected"),
    [
        (CacheVerdict.EXPECTED_WRITE, 0, usage(1400, write=1365), 0),
        (CacheVerdict.HIT, 0, usage(9000, read=8894), 4644),
        (CacheVerdict.CLIENT_BREAK, 5000, usage(9000, read=3900), 3900),
        (CacheVerdict.PROVIDER_MISS, 4000, usage(9000), 4000),
        (CacheVerdict.BELOW_MINIMUM, 0, usage(900), 0),
        (CacheVerdict.UNKNOWN, 0, None, 0),
    ],
)
def test_consistent_verdicts_pass(kind, lost, reported, expected):
    assert contradiction(judgement(kind, lost), reported, expected) is None


def test_a_reported_write_below_the_table_is_an_expected_write():
    pred = prediction("anthropic", "first_call", 0, 0, 0, False, True, 3)  # the table says below its minimum
    judged = verdict(pred, usage(1400, write=1365), Relation(RelationKind.EPOCH_START))
    assert (judged.verdict, judged.lost_tokens) == (CacheVerdict.EXPECTED_WRITE, 0)


def test_a_read_where_none_was_predicted_is_a_hit_not_a_break():
    pred = prediction("anthropic", "diverged", 0, 0, 3000, False, False, 3)
    judged = verdict(pred, usage(4000, read=2900), Relation(RelationKind.DIVERGED))
    assert (judged.verdict, judged.lost_tokens) == (CacheVerdict.HIT, 0)
