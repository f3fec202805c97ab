import copy
import itertools
import random

import pytest
from jsonpointer import resolve_pointer

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.relation import CallContext, classify, marker_moves, policy_signature, shared_prefix
from ctxscope.vocab.kinds import RelationKind

from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    claude_code_turns,
    default_system,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    text,
    tool_result,
    user,
)

A = "anthropic.messages"


def ctx(body, api=A, provider="anthropic", epoch=0):
    return CallContext(canonicalize(api, body), provider, api, epoch, body)


def rel(prev_body, cur_body, api=A, provider="anthropic"):
    return classify(ctx(prev_body, api, provider), ctx(cur_body, api, provider))


def assert_resolves(body, pointer):
    resolve_pointer(body, pointer)


def test_first_call_is_a_session_start():
    r = classify(None, ctx(make_anthropic_body()))
    assert (r.kind, r.epoch_reason, r.pointer) == (RelationKind.EPOCH_START, "session_start", None)


def test_agent_loop_is_append_only_with_marker_moves():
    bodies = claude_code_turns(6)
    for i in range(1, len(bodies)):
        r = rel(bodies[i - 1], bodies[i])
        assert r.kind == RelationKind.APPEND_ONLY, (i, r)
        assert r.shared_segments == len(canonicalize(A, bodies[i - 1]).segments)
        assert r.pointer is None and r.epoch_reason is None
    # Turn 1 re-sends message 0 as a plain string without its marker: a move, not a change.
    assert rel(bodies[0], bodies[1]).marker_moves == ("/messages/0/content",)
    assert rel(bodies[2], bodies[3]).marker_moves == ("/messages/4/content/0",)


def test_same_prompt_is_identical_even_with_other_parameters():
    a = make_anthropic_body(system="S", messages=[user("hi")], max_tokens=100, temperature=0.0)
    b = make_anthropic_body(
        system="S", messages=[user("hi")], max_tokens=8000, temperature=1.0, stream=True, metadata={"user_id": "u"}
    )
    r = rel(a, b)
    assert (r.kind, r.marker_moves) == (RelationKind.IDENTICAL, ())


def test_cache_control_move_only_is_identical_with_moves():
    a = make_anthropic_body(system=[text("S", cache_control=dict(EPHEMERAL))], messages=[user([text("hi")])])
    b = make_anthropic_body(system=[text("S")], messages=[user([text("hi", cache_control=dict(EPHEMERAL))])])
    r = rel(a, b)
    assert r.kind == RelationKind.IDENTICAL
    assert r.marker_moves == ("/system/0", "/messages/0/content/0")


def test_string_versus_text_block_is_not_a_divergence():
    a = make_anthropic_body(messages=[user([text("hello")]), assistant([text("hi")]), user("go")])
    b = make_anthropic_body(
        messages=[user("hello"), assistant("hi"), user([text("go")]), assistant("ok"), user("more")]
    )
    assert rel(a, b).kind == RelationKind.APPEND_ONLY


def test_system_prompt_edit_diverges_inside_the_block():
    a = claude_code_turns(3)[-1]
    b = copy.deepcopy(a)
    b["system"] = default_system(" Today is Tuesday.")
    b["system"][1]["cache_control"] = dict(EPHEMERAL)
    r = rel(a, b)
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/system/1/text")
    assert r.shared_segments == 4  # three tools and the first system block
    assert_resolves(b, r.pointer)


def test_tool_schema_edit_points_into_the_schema():
    a = claude_code_turns(3)[-1]
    b = copy.deepcopy(a)
    b["tools"][1]["input_schema"]["properties"]["path"]["description"] = "Absolute file path."
    r = rel(a, b)
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/tools/1/input_schema/properties/path/description")
    assert r.shared_segments == 1
    assert_resolves(b, r.pointer)


def test_tool_inserted_and_removed():
    a = claude_code_turns(2)[-1]
    inserted = copy.deepcopy(a)
    inserted["tools"].insert(1, {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}})
    r = rel(a, inserted)
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/tools/1/name")
    removed = copy.deepcopy(a)
    del removed["tools"][2]
    r = rel(a, removed)
    # The first difference is content missing at the end of the tools array.
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/tools/2")
    assert_resolves(removed, "/tools")


def test_forked_conversation_diverges_at_the_fork():
    bodies = claude_code_turns(6)
    fork = copy.deepcopy(bodies[3])
    fork["messages"].append(assistant([text("A different plan.")]))
    r = rel(bodies[5], fork)
    assert r.kind == RelationKind.DIVERGED
    assert r.shared_segments == len(canonicalize(A, bodies[3]).segments)
    assert r.pointer == "/messages/7/content/0/text"
    assert_resolves(fork, r.pointer)


def test_block_gaining_a_field_points_at_the_field():
    a = make_anthropic_body(messages=[user("x"), assistant("y"), user([tool_result("t", "out")])])
    b = copy.deepcopy(a)
    b["messages"][2]["content"][0]["is_error"] = True
    r = rel(a, b)
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/messages/2/content/0/is_error")


def test_history_shrink_points_at_the_first_missing_position():
    bodies = claude_code_turns(5)
    r = rel(bodies[4], bodies[2])
    assert r.kind == RelationKind.DIVERGED
    assert r.pointer == "/messages/5"
    assert len(bodies[2]["messages"]) == 5  # one past the end: the parent resolves
    assert_resolves(bodies[2], "/messages")
    assert "shrank" in r.detail


def test_block_removed_inside_a_message():
    a = make_anthropic_body(messages=[user([text("one"), text("two")]), assistant("ok")])
    b = make_anthropic_body(messages=[user([text("one")]), assistant("ok")])
    r = rel(a, b)
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/messages/0/content/1")


def test_model_switch_is_an_epoch_and_still_reports_the_prefix():
    a = claude_code_turns(3)[-1]
    b = copy.deepcopy(a)
    b["model"] = "claude-opus-4-6"
    r = rel(a, b)
    assert (r.kind, r.epoch_reason, r.pointer) == (RelationKind.EPOCH_START, "model_change", None)
    assert r.shared_segments == len(canonicalize(A, a).segments)
    assert r.detail == "claude-sonnet-4-5 -> claude-opus-4-6"
    b["system"][1]["text"] = "Changed."
    assert rel(a, b).pointer == "/system/1/text"


def test_provider_api_and_capture_epochs():
    body = make_anthropic_body()
    prev = ctx(body)
    assert classify(prev, ctx(body, provider="u/proxy")).epoch_reason == "provider_change"
    count = dict(body)
    count.pop("max_tokens")
    assert classify(prev, ctx(count, api="anthropic.count_tokens")).epoch_reason == "api_change"
    r = classify(prev, ctx(body, epoch=1))
    assert (r.kind, r.epoch_reason) == (RelationKind.EPOCH_START, "capture_resumed")


def _strip_all_markers(body):
    for blk in body["system"]:
        blk.pop("cache_control", None)
    for m in body["messages"]:
        for blk in m["content"] if isinstance(m["content"], list) else []:
            blk.pop("cache_control", None)


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b["system"][1].__setitem__("cache_control", {"type": "ephemeral", "ttl": "1h"}),
        lambda b: b.__setitem__("cache_control", dict(EPHEMERAL)),
        lambda b: _strip_all_markers(b),
    ],
)
def test_cache_policy_changes_start_an_epoch(change):
    a = claude_code_turns(3)[-1]
    b = copy.deepcopy(a)
    change(b)
    r = rel(a, b)
    assert (r.kind, r.epoch_reason) == (RelationKind.EPOCH_START, "cache_policy_change")
    assert r.detail.startswith("changed: ")


def test_openai_cache_keys_are_policy_but_comparison_ids_are_not():
    a = make_responses_body(input="hi", prompt_cache_key="k1", prompt_cache_options={"comparison_response_id": "r1"})
    b = dict(a, prompt_cache_options={"comparison_response_id": "r2"})
    c = dict(a, prompt_cache_key="k2")
    api = "openai.responses"
    assert rel(a, b, api, "openai").kind == RelationKind.IDENTICAL
    r = rel(a, c, api, "openai")
    assert (r.kind, r.epoch_reason, r.detail) == (RelationKind.EPOCH_START, "cache_policy_change", "changed: key")
    assert policy_signature(canonicalize(api, a))["options"] is None


def test_previous_response_id_without_prefix_is_not_comparable():
    api = "openai.responses"
    a = make_responses_body(input="first")
    b = make_responses_body(input=[{"role": "user", "content": "next"}], previous_response_id="resp_1")
    r = rel(a, b, api, "openai")
    assert r.kind == RelationKind.NOT_COMPARABLE and "resp_1" in r.detail
    assert classify(None, ctx(b, api, "openai")).kind == RelationKind.NOT_COMPARABLE


def test_unparseable_bodies_are_not_comparable():
    good = ctx(make_anthropic_body())
    bad = CallContext(None, "anthropic", A, 0, b"\x00garbage")
    assert classify(good, bad).kind == RelationKind.NOT_COMPARABLE
    assert classify(None, bad).kind == RelationKind.NOT_COMPARABLE
    r = classify(bad, good)
    assert r.kind == RelationKind.NOT_COMPARABLE and "predecessor" in r.detail


def test_chat_tool_call_id_change_points_at_the_message_field():
    api = "openai.chat"
    msgs = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    a = make_chat_body(messages=msgs)
    b = copy.deepcopy(a)
    b["messages"][2]["tool_call_id"] = "c9"
    r = rel(a, b, api, "openai")
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/messages/2/tool_call_id")
    c = copy.deepcopy(a)
    c["messages"].append({"role": "user", "content": "more"})
    assert rel(a, c, api, "openai").kind == RelationKind.APPEND_ONLY


def test_chat_parameter_changes_never_diverge():
    api = "openai.chat"
    a = make_chat_body(temperature=0.1, max_tokens=10, stream=False)
    b = make_chat_body(temperature=0.9, max_completion_tokens=99, stream=True, stream_options={"include_usage": True})
    assert rel(a, b, api, "openai").kind == RelationKind.IDENTICAL


def test_responses_loop_and_instruction_edit():
    api = "openai.responses"
    items = [{"role": "user", "content": "list files"}]
    a = make_responses_body(instructions="Be terse.", input=list(items))
    b = make_responses_body(
        instructions="Be terse.",
        input=items
        + [
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        ],
    )
    assert rel(a, b, api, "openai").kind == RelationKind.APPEND_ONLY
    c = dict(b, instructions="Be verbose.")
    r = rel(b, c, api, "openai")
    assert (r.kind, r.pointer) == (RelationKind.DIVERGED, "/instructions")


def test_every_divergence_pointer_resolves_in_the_current_body():
    base = claude_code_turns(4)[-1]
    edits = [
        lambda b: b["messages"][0].__setitem__("content", "Fix the other bug."),
        lambda b: b["messages"][1]["content"][1]["input"].__setitem__("path", "g.py"),
        lambda b: b["messages"][2]["content"][0].__setitem__("content", "changed"),
        lambda b: b["tools"][0].__setitem__("name", "cat"),
        lambda b: b["system"][0].__setitem__("text", "Hi."),
    ]
    for edit in edits:
        cur = copy.deepcopy(base)
        edit(cur)
        r = rel(base, cur)
        assert r.kind == RelationKind.DIVERGED
        assert_resolves(cur, r.pointer)


def test_refinement_skips_normalised_noise_and_escapes_keys():
    a = make_anthropic_body(
        tools=[{"name": "t", "input_schema": {"properties": {"a/b~c": {"description": "x"}}}}],
        messages=[user([text("one")]), assistant([text("two")])],
    )
    b = copy.deepcopy(a)
    b["messages"][1]["content"][0].update(citations=[], text="changed")
    r = rel(a, b)
    assert r.pointer == "/messages/1/content/0/text"
    c = copy.deepcopy(a)
    c["tools"][0]["input_schema"]["properties"]["a/b~c"]["description"] = "y"
    r = rel(a, c)
    assert r.pointer == "/tools/0/input_schema/properties/a~1b~0c/description"
    assert resolve_pointer(c, r.pointer) == "y"


def _naive_prefix(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def test_shared_prefix_matches_a_plain_walk():
    rng = random.Random(5)
    for _ in range(400):
        a = tuple(rng.choice("abc") for _ in range(rng.randrange(60)))
        b = a[: rng.randrange(len(a) + 1)] + tuple(rng.choice("abcd") for _ in range(rng.randrange(60)))
        assert shared_prefix(a, b) == shared_prefix(b, a) == _naive_prefix(a, b), (a, b)
    assert shared_prefix((), ("a",)) == shared_prefix((), ()) == 0


def test_marker_moves_match_a_walk_over_every_shared_segment():
    bodies = claude_code_turns(8, reminders=(2, 5))
    prompts = [canonicalize(A, b) for b in bodies]
    for prev in prompts:
        for cur in prompts:
            k = shared_prefix(prev.hashes, cur.hashes)
            walk = tuple(
                cur.segments[i].pointer for i in range(k) if prev.segments[i].breakpoint != cur.segments[i].breakpoint
            )
            assert marker_moves(prev, cur, k) == walk
    assert any(marker_moves(p, c, shared_prefix(p.hashes, c.hashes)) for p, c in itertools.pairwise(prompts))
