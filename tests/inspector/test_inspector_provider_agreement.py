"""The provider's cache diagnosis held against ctxscope's verdict: the table of
``provider_agreement`` and the stored value of real analysed calls."""

from __future__ import annotations

import json

import pytest

from ctxscope.inspector.analyses.cache.provider_agreement import diagnosis_words, provider_agreement
from ctxscope.inspector.analyses.cache.verdicts import parse_provider_diagnostics
from ctxscope.vocab.kinds import ProviderAgreement, RelationKind

from support.factories import analysed as run
from support.factories import anthropic_response
from support.factories import exchange_at as ex
from support.inspector_bodies import assistant, make_anthropic_body, user

A, D, E, N = RelationKind.APPEND_ONLY, RelationKind.DIVERGED, RelationKind.EPOCH_START, RelationKind.NOT_COMPARABLE
AGREE, DIS, PEND, NONE = (
    ProviderAgreement.AGREE,
    ProviderAgreement.DISAGREE,
    ProviderAgreement.PENDING,
    ProviderAgreement.NONE,
)


def _anthropic(reason):
    body = {"diagnostics": {"previous_message_id": "msg_prev"}}
    diag = {"cache_miss_reason": reason} if reason != "absent" else None
    return parse_provider_diagnostics("anthropic", body, {"diagnostics": diag})


def _openai(diag):
    body = {"prompt_cache_options": {"comparison_response_id": "resp_prev"}}
    return parse_provider_diagnostics("openai-responses", body, {"prompt_cache_diagnostics": diag})


@pytest.mark.parametrize(
    ("diag", "relation", "epoch", "verdict", "pointer", "kind", "expected"),
    [
        (
            _anthropic({"type": "system_changed", "cache_missed_input_tokens": 9}),
            D,
            None,
            "client_break",
            "/system/0/text",
            "system",
            AGREE,
        ),
        (
            _anthropic({"type": "system_changed", "cache_missed_input_tokens": 9}),
            D,
            None,
            "client_break",
            "/messages/0/content",
            "user_text",
            DIS,
        ),
        (_anthropic({"type": "system_changed", "cache_missed_input_tokens": 9}), A, None, "hit", None, None, DIS),
        (
            _anthropic({"type": "tools_changed", "cache_missed_input_tokens": 9}),
            D,
            None,
            "client_break",
            "/tools/1/description",
            "tools",
            AGREE,
        ),
        (
            _anthropic({"type": "messages_changed", "cache_missed_input_tokens": 9}),
            D,
            None,
            "client_break",
            "/messages/2/content/0/text",
            "user_text",
            AGREE,
        ),
        (
            _anthropic({"type": "model_changed", "cache_missed_input_tokens": 9}),
            E,
            "model_change",
            "expected_write",
            "/model",
            "model",
            AGREE,
        ),
        (_anthropic("absent"), A, None, "hit", None, None, AGREE),
        (_anthropic("absent"), D, None, "client_break", "/system/0/text", "system", DIS),
        (_anthropic(None), D, None, "client_break", "/system/0/text", "system", PEND),
        (_anthropic({"type": "previous_message_not_found"}), A, None, "hit", None, None, NONE),
        (_anthropic({"type": "unavailable"}), A, None, "hit", None, None, NONE),
        (_openai({"type": "cache_hit"}), RelationKind.IDENTICAL, None, "hit", None, None, AGREE),
        (
            _openai({"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 5}),
            D,
            None,
            "client_break",
            "/tools/0/description",
            "tools",
            AGREE,
        ),
        (
            _openai({"type": "cache_miss", "reason": "input_changed", "cache_missed_tokens": 5}),
            D,
            None,
            "client_break",
            "/instructions",
            "system",
            AGREE,
        ),
        (
            _openai({"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 5}),
            A,
            None,
            "hit",
            None,
            None,
            DIS,
        ),
        (
            _openai({"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 5}),
            N,
            None,
            "hit",
            None,
            None,
            NONE,
        ),
        (_openai({"type": "comparison_response_not_found"}), A, None, "hit", None, None, NONE),
        (None, D, None, "client_break", "/system/0/text", "system", NONE),
    ],
)
def test_the_table(diag, relation, epoch, verdict, pointer, kind, expected):
    assert provider_agreement(diag, relation, epoch, verdict, pointer, kind) == expected


def test_the_relations_pointer_stands_for_the_break_when_the_prediction_names_none():
    diag = _anthropic({"type": "system_changed", "cache_missed_input_tokens": 9})
    assert provider_agreement(diag, D, None, "not_requested", None, None, "/system") == AGREE
    assert provider_agreement(diag, D, None, "not_requested", None, None, "/messages/1") == DIS


def test_the_words():
    assert diagnosis_words(_anthropic({"type": "system_changed", "cache_missed_input_tokens": 4200})) == (
        "system_changed, 4,200 tokens missed"
    )
    assert diagnosis_words(_anthropic(None)) == "pending"
    assert diagnosis_words(_openai({"type": "cache_hit"})) == "cache hit"
    assert diagnosis_words(None) is None


SYSTEM = "You are careful. " * 400
TOOLS = [{"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}]


def test_a_system_break_the_provider_diagnosed_is_stored_as_agreeing(tmp_path):
    opts = {"cache_control": {"type": "ephemeral"}}
    first = make_anthropic_body(
        tools=TOOLS,
        system=[{"type": "text", "text": SYSTEM, **opts}],
        messages=[user("hi")],
        diagnostics={"previous_message_id": None},
    )
    second = make_anthropic_body(
        tools=TOOLS,
        system=[{"type": "text", "text": SYSTEM + " Now terse.", **opts}],
        messages=[user("hi"), assistant("hi there"), user("more")],
        diagnostics={"previous_message_id": "msg_1"},
    )
    usage = {"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 1700}
    reason = {"type": "system_changed", "cache_missed_input_tokens": 1700}
    responses = [
        anthropic_response(usage=usage),
        dict(anthropic_response(usage=usage), id="msg_2", diagnostics={"cache_miss_reason": reason}),
    ]
    db, _ = run(
        tmp_path / "c.db",
        [
            ex(first, 0, response=responses[0], session_label="s"),
            ex(second, 5, response=responses[1], session_label="s"),
        ],
    )
    rows = db.execute("SELECT relation, cache FROM calls ORDER BY started_at").fetchall()
    caches = [json.loads(c) for _, c in rows]
    assert [r for r, _ in rows] == ["EPOCH_START", "DIVERGED"]
    assert caches[0].get("provider_agreement") is None  # "none": the first turn has nothing to compare
    assert caches[1]["provider_agreement"] == "agree", caches[1]
