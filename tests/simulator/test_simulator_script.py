"""Script step schema: validation, default replies, output token counting."""

from __future__ import annotations

import pytest

from ctxscope.simulator.model.script import Reply, ScriptError, default_text, output_tokens, parse_script, parse_step
from ctxscope.simulator.wire.sse import Event, split_json, split_text
from ctxscope.vocab.tokens import count_tokens


def test_parse_full_step():
    step = parse_step(
        {
            "text": "hi",
            "tool_calls": [
                {"name": "read", "arguments": {"path": "a"}},
                {"name": "ls", "arguments": "{bad", "id": "call_x"},
            ],
            "thinking": "hm",
            "delay_ms": 5,
            "chunk_delay_ms": 1,
            "stop_reason": "length",
            "context_window": 100,
            "match": "needle",
            "stream_error": {"status": 529, "type": "overloaded_error", "after_events": 2},
        }
    )
    assert step.tool_calls[0].arguments == '{"path":"a"}' and step.tool_calls[0].input_object() == {"path": "a"}
    assert step.tool_calls[1].input_object() == {} and step.tool_calls[1].id == "call_x"
    assert step.truncated and step.context_window == 100 and step.stream_error.after_events == 2
    assert step.matches("a needle here") and not step.matches("hay")


@pytest.mark.parametrize(
    "bad",
    [
        {"txt": "typo"},
        {"tool_calls": [{"arguments": {}}]},
        {"tool_calls": [{"name": "x", "arguments": 3}]},
        {"error": {"status": "429"}},
        {"error": {"status": 429, "colour": "red"}},
        {"delay_ms": -1},
        {"stop_reason": "whatever"},
        {"context_window": 0},
        "not an object",
    ],
)
def test_invalid_steps_are_rejected(bad):
    with pytest.raises(ScriptError):
        parse_step(bad)


def test_parse_script_names_the_step():
    with pytest.raises(ScriptError, match="step 1"):
        parse_script([{"text": "ok"}, {"nope": 1}])
    with pytest.raises(ScriptError):
        parse_script({"text": "not a list"})


def test_default_and_empty_replies():
    long = "x" * 100
    assert default_text("  what   is this?  ") == "sim: what is this?"
    assert default_text(long) == "sim: " + "x" * 60
    assert default_text("") == "sim: ok"
    assert Reply.from_step(None, "hello").text == "sim: hello"
    assert Reply.from_step(parse_step({"delay_ms": 1}), "hello").text == "sim: hello"
    empty = Reply.from_step(parse_step({"empty": True, "text": "ignored"}), "hello")
    assert (empty.text, empty.tool_calls) == ("", ())
    tools_only = Reply.from_step(parse_step({"tool_calls": [{"name": "ls"}]}), "hello")
    assert tools_only.text == ""


def test_output_tokens_counts_text_thinking_and_tool_json():
    reply = Reply.from_step(
        parse_step({"text": "hello world", "thinking": "hmm", "tool_calls": [{"name": "read", "arguments": {"p": 1}}]}),
        "",
    )
    assert output_tokens(reply) == count_tokens("hello world") + count_tokens("hmm") + count_tokens(
        "read"
    ) + count_tokens('{"p":1}')


def test_text_and_json_splitting_round_trips():
    text = "The quick brown fox jumps over the lazy dog, twice.\nAgain  here."
    pieces = split_text(text)
    assert len(pieces) > 3 and "".join(pieces) == text
    args = '{"path":"src/main.py","offset":10}'
    assert len(split_json(args)) == 3 and "".join(split_json(args)) == args
    assert split_text("") == [] and split_json("") == []


def test_event_encoding():
    assert Event({"a": 1}, "ping").encode() == b'event: ping\ndata: {"a":1}\n\n'
    assert Event("[DONE]").encode() == b"data: [DONE]\n\n"


def test_default_reply_echoes_the_user_text_not_the_reminders():
    from ctxscope.simulator.model.script import default_text

    text = "<system-reminder>\nyou are in a repo\n</system-reminder>\n\nlist the files"
    assert default_text(text) == "sim: list the files"
    assert default_text("") == "sim: ok"
