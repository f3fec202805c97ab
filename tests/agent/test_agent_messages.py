"""The neutral message model: JSON round trip, history repair, rejected-answer and rewrite helpers."""

from __future__ import annotations

from ctxscope.agent.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    assistant_message,
    is_empty_answer,
    message_from_dict,
    message_to_dict,
    repair_history,
    replace_text,
    tool_message,
    user_message,
    without_tool_calls,
)


def test_round_trip_keeps_every_block_kind():
    m = Message(
        "assistant",
        (
            ThinkingBlock("hmm", "sig", None, "anthropic"),
            TextBlock("hi"),
            ToolCall("c1", "read", {"path": "x"}, '{"path": "x"}'),
            ToolCall("c2", "bash", {}, "{oops", "arguments are not valid JSON"),
        ),
        meta={"turn": 1},
    )
    t = tool_message([ToolResult("c1", "read", "data", False, {"n": 1}), ToolResult("c2", "bash", "bad", True)])
    for msg in (m, t, user_message("q", kind="input")):
        assert message_from_dict(message_to_dict(msg)) == msg


def test_repair_adds_missing_results_and_missing_tool_message():
    a = assistant_message("x", [ToolCall("c1", "read", {}), ToolCall("c2", "ls", {})])
    partial = tool_message([ToolResult("c1", "read", "ok")])
    fixed = repair_history([user_message("q"), a, partial, user_message("next")], "cancelled")
    assert [r.tool_call_id for r in fixed[2].tool_results] == ["c1", "c2"]
    assert fixed[2].tool_results[1].is_error and "cancelled" in fixed[2].tool_results[1].content
    fixed = repair_history([user_message("q"), a], "interrupted")
    assert fixed[-1].role == "tool" and len(fixed[-1].tool_results) == 2
    complete = [user_message("q"), a, tool_message([ToolResult("c1", "read", "1"), ToolResult("c2", "ls", "2")])]
    assert repair_history(complete) == complete


def test_without_tool_calls_and_empty_answers():
    a = assistant_message("let me look", [ToolCall("c1", "read", {})])
    kept = without_tool_calls(a)
    assert kept is not None and kept.tool_calls == () and kept.text == "let me look"
    assert without_tool_calls(assistant_message("", [ToolCall("c1", "read", {})])) is None
    assert is_empty_answer(Message("assistant", (ThinkingBlock("only thinking"),)))
    assert not is_empty_answer(a)


def test_replace_text_keeps_tool_calls_in_place():
    a = Message("assistant", (TextBlock("a"), TextBlock("b"), ToolCall("c", "ls", {})))
    r = replace_text(a, "new")
    assert r.content == (TextBlock("new"), ToolCall("c", "ls", {}))
    r = replace_text(Message("assistant", (ThinkingBlock("t"), ToolCall("c", "ls", {}))), "x")
    assert r.content == (ThinkingBlock("t"), TextBlock("x"), ToolCall("c", "ls", {}))
