"""diff_calls on stored calls: the first divergence with both sides, marker moves apart, defaults."""

from __future__ import annotations

import copy

import pytest

from ctxscope.inspector.reading.calldiff import diff_calls

from support.factories import analysed as run
from support.factories import exchange_at as ex
from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    claude_code_turns,
    default_system,
    default_tools,
    make_anthropic_body,
    make_chat_body,
    text,
    tool_result,
    user,
)


def store(tmp_path, *bodies, **kw):
    """Store each body (a dict, or raw bytes) as one call; returns the reader and the ids in order."""
    exchanges = [
        ex(b, i, **kw) if isinstance(b, dict) else ex(None, i, request_body=b, **kw) for i, b in enumerate(bodies)
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    ids = [r[0] for r in db.execute("SELECT id FROM calls ORDER BY rowid").fetchall()]
    return db, ids


def test_system_edit_shows_both_sides_at_the_first_difference(tmp_path):
    a = make_anthropic_body(default_system(), default_tools(), [user("go")])
    b = copy.deepcopy(a)
    b["system"][1]["text"] = b["system"][1]["text"].replace("small steps", "tiny steps")
    db, (a_id, b_id) = store(tmp_path, a, b)
    d = diff_calls(db, b_id)  # the later call against its predecessor
    assert d["a"]["id"] == b_id and d["b"]["id"] == a_id and d["b_is_predecessor"] is True
    assert (d["relation"], d["pointer"]) == ("DIVERGED", "/system/1/text")
    first = d["first_divergence"]
    assert (first["pointer_a"], first["pointer_b"], first["kind_a"], first["kind_b"]) == (
        "/system/1/text",
        "/system/1/text",
        "system",
        "system",
    )
    assert first["a"] == b["system"][1]["text"] and first["b"] == a["system"][1]["text"]
    assert first["text"]["offset"] == a["system"][1]["text"].index("small")
    assert first["text"]["a_excerpt"].endswith("tiny steps and explain what you change.")
    assert d["shared_segments"] == 4 and [s["pointer"] for s in d["removed"]] == ["/system/1"]
    assert [s["pointer"] for s in d["added"]] == ["/system/1"]
    assert d["resent"] == {"segments": 1, "tokens": 1}  # "go", after the edit


def test_marker_moves_and_restrung_strings_are_not_differences(tmp_path):
    bodies = claude_code_turns(2)
    db, (first, second) = store(tmp_path, *bodies)
    d = diff_calls(db, second, first)
    assert (d["relation"], d["pointer"], d["first_divergence"]) == ("APPEND_ONLY", None, None)
    assert d["markers"]["moved"] == [{"segment": 5, "pointer": "/messages/0/content", "a": None, "b": EPHEMERAL}]
    assert d["markers"]["a"] == ["/system/1", "/messages/2/content/0"]
    assert d["markers"]["b"] == ["/system/1", "/messages/0/content/0"]
    assert [(s["kind"], s["pointer"]) for s in d["added"]] == [
        ("assistant_text", "/messages/1/content/0"),
        ("tool_call", "/messages/1/content/1"),
        ("tool_result", "/messages/2/content/0"),
    ]
    assert d["removed"] == [] and d["resent"]["segments"] == 0
    assert d["tokens"]["a"] > d["tokens"]["b"] == d["shared_tokens"]


def test_a_removed_tool_points_one_past_the_end(tmp_path):
    tools = default_tools()
    a = make_anthropic_body(default_system(), tools, [user("go")])
    b = make_anthropic_body(default_system(), tools[:2], [user("go")])
    db, (_a_id, b_id) = store(tmp_path, a, b)
    d = diff_calls(db, b_id)
    assert d["pointer"] == "/tools/2"
    first = d["first_divergence"]
    assert first["a_missing"] is True and first["a"] is None
    assert first["pointer_b"] == "/tools/2" and first["b"]["name"] == "bash"


def test_message_level_difference_maps_to_the_other_body(tmp_path):
    a = make_chat_body([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "x"}])
    b = make_chat_body([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c2", "content": "x"}])
    common = {"provider": "openai", "path": "/v1/chat/completions"}
    db, (a_id, b_id) = store(tmp_path, a, b, **common)
    d = diff_calls(db, b_id, a_id)
    assert d["pointer"] == "/messages/1/tool_call_id"
    first = d["first_divergence"]
    assert (first["pointer_b"], first["a"], first["b"]) == ("/messages/1/tool_call_id", "c2", "c1")


def test_parameters_change_without_a_divergence(tmp_path):
    a = make_anthropic_body(messages=[user("hi")], max_tokens=100, temperature=0.2)
    b = make_anthropic_body(messages=[user("hi")], max_tokens=2000, temperature=0.2)
    db, (_a_id, b_id) = store(tmp_path, a, b)
    d = diff_calls(db, b_id)
    assert d["relation"] == "IDENTICAL" and d["pointer"] is None
    assert d["params_changed"] == {"max_tokens": {"a": 2000, "b": 100}} and d["cache_policy_changed"] == {}


def test_cache_policy_and_model_changes_are_epochs_with_the_content_diff(tmp_path):
    a = make_anthropic_body(messages=[user("hi")])
    b = make_anthropic_body(
        messages=[user("hi"), assistant("yo"), user([text("more", cache_control=EPHEMERAL)])], model="claude-opus-4-1"
    )
    db, (_a_id, b_id) = store(tmp_path, a, b)
    d = diff_calls(db, b_id)
    assert (d["relation"], d["epoch_reason"]) == ("EPOCH_START", "model_change")
    assert d["pointer"] is None and len(d["added"]) == 2
    assert d["cache_policy_changed"]["uses_breakpoints"] == {"a": True, "b": False}


def test_long_values_are_clipped(tmp_path):
    long = "x" * 10_000
    db, (_a_id, b_id) = store(
        tmp_path, make_anthropic_body(messages=[user(long)]), make_anthropic_body(messages=[user(long + "y")])
    )
    first = diff_calls(db, b_id, max_chars=100)["first_divergence"]
    assert first["a"].startswith("x" * 100) and first["a"].endswith("[9901 more chars]")
    assert first["text"]["offset"] == 10_000 and first["text"]["b_excerpt"] == "x" * 80


def test_first_calls_unknown_ids_and_unparseable_bodies(tmp_path):
    db, (a_id,) = store(tmp_path, make_anthropic_body())
    d = diff_calls(db, a_id[:10])  # a unique prefix
    assert d["a"]["id"] == a_id and d["b"] is None and d["reason"] == "this call has no predecessor"
    with pytest.raises(KeyError):
        diff_calls(db, "nope")
    with pytest.raises(KeyError):
        diff_calls(db, a_id, "nope")
    db2, (good, bad) = store(tmp_path / "x", make_anthropic_body(), b"{not json")
    d = diff_calls(db2, bad, good)
    assert d["relation"] == "NOT_COMPARABLE" and "raw bodies" in d["reason"]


def test_diff_against_a_later_call_and_tool_result_content(tmp_path):
    a = make_anthropic_body(messages=[user([tool_result("t1", "old output")])])
    b = make_anthropic_body(messages=[user([tool_result("t1", [text("new output")])])])
    db, (a_id, b_id) = store(tmp_path, a, b)
    d = diff_calls(db, a_id, b_id)  # the older call against the newer one: any pair works
    assert d["b_is_predecessor"] is False and d["relation"] == "DIVERGED"
    first = d["first_divergence"]
    assert first["pointer_a"] == "/messages/0/content/0/content"
    assert (first["a"], first["b"]) == ("old output", [{"type": "text", "text": "new output"}])
