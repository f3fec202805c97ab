"""The per-API stream handlers driven directly, and the readers they share."""

from __future__ import annotations

import pytest

from ctxscope.proxy.wire.reassemble import GenericStream, error_of, first_field, index_of, joined
from ctxscope.proxy.wire.reassemble_anthropic import AnthropicStream
from ctxscope.proxy.wire.reassemble_gemini import GeminiStream
from ctxscope.proxy.wire.reassemble_openai import ChatStream, ResponsesStream, responses_stop
from ctxscope.proxy.wire.sse import SSEEvent


def drive(handler, frames):
    for data in frames:
        handler.on(SSEEvent(None, "[DONE]" if data is None else "{}"), data)
    return handler.build()


def test_shared_readers():
    assert error_of({"error": {"type": "overloaded"}}) == {"type": "overloaded"}
    assert error_of({"error": "boom"}) == {"message": "boom"} and error_of({"type": "error"}) == {"type": "error"}
    assert index_of({"index": 3}) == 3 and index_of({"index": True}) == 0 and index_of({"index": -1}, default=7) == 7
    assert first_field([{"index": 1, "r": "b"}, {"index": 0, "r": "a"}], "r") == "a" and first_field("x", "r") is None
    assert joined(None, ["a", "b"]) == "ab" and joined("x", []) == "x"
    assert responses_stop({"status": "incomplete"}) == "incomplete" and responses_stop({"status": "queued"}) is None


@pytest.mark.parametrize(
    ("handler", "frames", "text", "stop"),
    [
        (
            AnthropicStream(),
            [
                {"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 3}}},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "he"}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "llo"}},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
                {"type": "message_stop"},
            ],
            lambda b: b["content"][0]["text"],
            "end_turn",
        ),
        (
            ChatStream(),
            [
                {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "he"}}]},
                {"id": "c", "choices": [{"index": 0, "delta": {"content": "llo"}, "finish_reason": "stop"}]},
                None,
            ],
            lambda b: b["choices"][0]["message"]["content"],
            "stop",
        ),
        (
            ResponsesStream(),
            [
                {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
                {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "content": []}},
                {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "he"},
                {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "llo"},
            ],
            lambda b: b["output"][0]["content"][0]["text"],
            None,
        ),  # cut before the terminal event
        (
            GeminiStream(),
            [
                {"candidates": [{"content": {"role": "model", "parts": [{"text": "he"}]}}]},
                {"candidates": [{"content": {"parts": [{"text": "llo"}]}, "finishReason": "STOP"}]},
            ],
            lambda b: b["candidates"][0]["content"]["parts"][0]["text"],
            "STOP",
        ),
    ],
)
def test_each_handler_joins_its_deltas(handler, frames, text, stop):
    body, got_stop = drive(handler, frames)
    assert text(body) == "hello" and got_stop == stop
    assert handler.complete == (stop is not None) and handler.error is None


def test_generic_stream_only_knows_the_end():
    handler = GenericStream()
    assert drive(handler, [{"x": 1}]) == (None, None) and not handler.complete
    assert drive(handler, [None]) == (None, None) and handler.complete
