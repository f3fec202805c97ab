"""The x-ctxscope-event grammar: what the agent writes (format_effect) the inspector reads back
(parse_effect), through the header joining HTTP does."""

from __future__ import annotations

import pytest

from ctxscope.inspector.pipeline.analysis_input import declared_markers
from ctxscope.vocab.effects import MAX_PARAMS, format_effect, join_effects, parse_effect, split_effects
from ctxscope.vocab.headers import ANNOTATION_PREFIX, Annotation
from ctxscope.vocab.kinds import MarkerKind


@pytest.mark.parametrize("kind", list(MarkerKind))
def test_every_kind_round_trips_with_its_parameters(kind):
    params = {"rung": "hall", "tokens_before": 81234, "negative": -3, "path": "a/b.txt", "on": True}
    parsed = parse_effect(format_effect(kind, **params))
    assert parsed is not None and parsed.kind == kind
    assert dict(parsed.params) == {**params, "on": "true"}


def test_hostile_values_cannot_forge_parameters_or_effects():
    text = format_effect(MarkerKind.REMINDER, source="x; pointer=/evil, compaction", n=None, empty="")
    assert text == "reminder; source=x__pointer_/evil__compaction"
    effects = [parse_effect(part) for part in split_effects(join_effects([text, text]))]
    assert [(e.kind, dict(e.params)) for e in effects if e is not None] == [
        ("reminder", {"source": "x__pointer_/evil__compaction"})
    ]


def test_long_values_and_many_parameters_are_cut():
    text = format_effect(MarkerKind.CHECKPOINT, **{f"p{i}": "v" * 100 for i in range(12)})
    parsed = parse_effect(text)
    assert parsed is not None and len(parsed.params) == MAX_PARAMS
    assert all(v == "v" * 64 for v in parsed.params.values())


def test_the_inspector_reads_the_agents_header_as_markers():
    value = join_effects(
        [format_effect(MarkerKind.COMPACTION, pointer="/messages/1", tokens_before=9), format_effect(MarkerKind.STEER)]
    )
    markers = declared_markers([(Annotation.EVENT.value, value), (ANNOTATION_PREFIX + "other", "steer")])
    assert [(m.kind, m.pointer, m.detail) for m in markers] == [
        ("compaction", "/messages/1", {"tokens_before": 9, "declared": True}),
        ("steer", None, {"declared": True}),
    ]


def test_a_json_effect_keeps_its_commas_and_a_broken_one_is_an_annotation():
    assert split_effects('{"kind": "checkpoint", "rung": "hall, then hmid"}') == [
        '{"kind": "checkpoint", "rung": "hall, then hmid"}'
    ]
    broken = parse_effect('{"kind": ' + "[" * 100_000)
    assert broken is not None and broken.kind == MarkerKind.ANNOTATION and len(broken.params["raw"]) == 500
    assert parse_effect("  ") is None
