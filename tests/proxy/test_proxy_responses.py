"""Reassembling final responses from recorded wire data (hand-built from the documented formats)."""

import contextlib
import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ctxscope.proxy.wire.responses import ParsedResponse, StreamAccumulator, parse_response
from ctxscope.vocab.apis import Api

from support import sdk_clients

SSE = "text/event-stream; charset=utf-8"


def frame(event: str | None, data, eol: str = "\n") -> str:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}{eol}" if event else ""
    return f"{head}data: {text}{eol}{eol}"


def typed(*events: dict, eol: str = "\n") -> bytes:
    """Anthropic / Responses style: the event line repeats the data's type."""
    return "".join(frame(e["type"], e, eol) for e in events).encode()


def data_only(*items, eol: str = "\n") -> bytes:
    """Chat Completions / Gemini style: data lines only."""
    return "".join(frame(None, item, eol) for item in items).encode()


def feed_split(api, raw: bytes, cuts, content_type=SSE, status=200) -> ParsedResponse:
    acc = StreamAccumulator(api, status=status, content_type=content_type)
    start = 0
    for cut in cuts:
        acc.feed(raw[start:cut])
        start = cut
    acc.feed(raw[start:])
    return acc.result()


def assert_split_invariant(api, raw: bytes, expected: ParsedResponse, content_type=SSE, step: int = 1):
    for i in range(0, len(raw) + 1, step):
        assert feed_split(api, raw, [i], content_type) == expected, i


# --- Anthropic Messages -----------------------------------------------------------------------

A_START = {
    "type": "message_start",
    "message": {
        "id": "msg_01XyZ",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 4000,
            "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 1,
            "service_tier": "standard",
        },
    },
}
CITATION = {
    "type": "char_location",
    "cited_text": "Paris is the capital",
    "document_index": 0,
    "document_title": "Atlas",
    "start_char_index": 0,
    "end_char_index": 20,
}


def a_block(i, block):
    return {"type": "content_block_start", "index": i, "content_block": block}


def a_delta(i, delta):
    return {"type": "content_block_delta", "index": i, "delta": delta}


def a_stop(i):
    return {"type": "content_block_stop", "index": i}


A_EVENTS = [
    A_START,
    {"type": "ping"},
    a_block(0, {"type": "thinking", "thinking": "", "signature": ""}),
    a_delta(0, {"type": "thinking_delta", "thinking": "The user wants "}),
    a_delta(0, {"type": "thinking_delta", "thinking": "the weather → 天気."}),
    a_delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
    a_stop(0),
    a_block(1, {"type": "text", "text": ""}),
    a_delta(1, {"type": "citations_delta", "citation": CITATION}),
    a_delta(1, {"type": "text_delta", "text": "Paris is "}),
    {"type": "ping"},
    a_delta(1, {"type": "text_delta", "text": "the capital. "}),
    a_stop(1),
    a_block(2, {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}),
    a_delta(2, {"type": "input_json_delta", "partial_json": ""}),
    a_delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Par'}),
    a_delta(2, {"type": "input_json_delta", "partial_json": 'is", "unit"'}),
    a_delta(2, {"type": "input_json_delta", "partial_json": ': "c"}'}),
    a_stop(2),
    {"type": "brand_new_event", "whatever": [1, 2]},
    a_block(3, {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {}}),
    a_delta(3, {"type": "input_json_delta", "partial_json": '{"tz": "Europe/Paris"}'}),
    a_stop(3),
    a_block(4, {"type": "tool_use", "id": "toolu_01C", "name": "no_args", "input": {}}),
    a_stop(4),
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 150},
    },
    {"type": "message_stop"},
]
A_STREAM = typed(*A_EVENTS)
A_BODY = {
    "id": "msg_01XyZ",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {
            "type": "thinking",
            "thinking": "The user wants the weather → 天気.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
        },
        {"type": "text", "text": "Paris is the capital. ", "citations": [CITATION]},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris", "unit": "c"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {"tz": "Europe/Paris"}},
        {"type": "tool_use", "id": "toolu_01C", "name": "no_args", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000,
        "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 150,
        "service_tier": "standard",
    },
}


def test_anthropic_stream_reassembles_the_message():
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, A_STREAM)
    assert r.stream and r.complete and r.error is None
    assert r.body == A_BODY
    assert r.stop_reason == "tool_use"
    assert r.event_count == len(A_EVENTS)
    assert r.usage.to_dict() == {"input": 4312, "output": 150, "cache_read": 4000, "cache_write": 300}
    assert r.usage.semantics == "additive"


def test_anthropic_stream_split_at_every_byte():
    expected = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, A_STREAM)
    assert_split_invariant(Api.ANTHROPIC_MESSAGES, A_STREAM, expected)


def test_anthropic_stream_sniffed_without_content_type_and_crlf():
    raw = typed(*A_EVENTS, eol="\r\n")
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, None, raw)
    assert r.stream and r.complete and r.body == A_BODY
    # Splits inside the first bytes exercise the sniffing.
    for i in range(40):
        assert feed_split(Api.ANTHROPIC_MESSAGES, raw, [i], content_type=None).body == A_BODY


def test_anthropic_message_delta_usage_is_cumulative():
    events = [
        A_START,
        a_block(0, {"type": "text", "text": ""}),
        a_delta(0, {"type": "text_delta", "text": "ok"}),
        a_stop(0),
        {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 40}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {
                "input_tokens": 15,
                "cache_read_input_tokens": 4100,
                "cache_creation_input_tokens": None,
                "output_tokens": 90,
                "server_tool_use": {"web_search_requests": 1},
            },
        },
        {"type": "message_stop"},
    ]
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, typed(*events))
    assert r.usage.to_dict() == {"input": 15 + 4100 + 300, "output": 90, "cache_read": 4100, "cache_write": 300}
    assert r.usage.raw["server_tool_use"] == {"web_search_requests": 1}
    assert r.stop_reason == "end_turn"


def test_anthropic_error_event_after_content():
    events = A_EVENTS[:12] + [{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, typed(*events))
    assert r.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert not r.complete
    assert r.body["content"][1]["text"] == "Paris is the capital. "
    assert r.stop_reason is None
    # Partial usage from message_start is kept.
    assert r.usage.to_dict() == {"input": 4312, "output": 1, "cache_read": 4000, "cache_write": 300}


def test_anthropic_error_event_before_anything():
    raw = b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Internal"}}\n\n'
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, raw)
    assert r.error == {"type": "api_error", "message": "Internal"}
    assert r.body is None and r.usage is None and not r.complete and r.event_count == 1


def test_anthropic_truncated_inside_tool_input_keeps_the_raw_json():
    events = A_EVENTS[:17]  # stream reset after '... "Par' + 'is", "unit"'
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, typed(*events))
    assert not r.complete and r.stop_reason is None
    assert r.body["content"][2]["input"] == '{"city": "Paris", "unit"'
    assert r.usage.output == 1


def test_anthropic_every_truncation_point_is_safe():
    stop_at = A_STREAM.index(b'data: {"type":"message_stop"}')
    for i in range(len(A_STREAM) + 1):
        r = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, A_STREAM[:i])
        assert r.complete == (i >= stop_at + len(b'data: {"type":"message_stop"}')), i
        assert r.error is None


def test_anthropic_json_response():
    body = dict(A_BODY, content=[{"type": "text", "text": "Hi"}], stop_reason="end_turn")
    r = parse_response(Api.ANTHROPIC_MESSAGES, 200, "application/json", json.dumps(body).encode())
    assert not r.stream and r.complete and r.event_count == 0
    assert r.body == body and r.stop_reason == "end_turn" and r.error is None
    assert r.usage.input == 4312


def test_anthropic_http_error():
    raw = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}'
    r = parse_response(Api.ANTHROPIC_MESSAGES, 529, "application/json", raw)
    assert r.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert r.body["request_id"] == "req_1" and r.usage is None and r.stop_reason is None


def test_anthropic_count_tokens():
    r = parse_response(Api.ANTHROPIC_COUNT_TOKENS, 200, "application/json", b'{"input_tokens": 2095}')
    assert r.usage.input == 2095 and r.usage.output is None and r.body == {"input_tokens": 2095}


# --- OpenAI Chat Completions ------------------------------------------------------------------

C_HEAD = {
    "id": "chatcmpl-9x",
    "object": "chat.completion.chunk",
    "created": 1730000000,
    "model": "gpt-4.1-2025",
    "system_fingerprint": "fp_abc",
    "service_tier": "default",
}


def c_chunk(choices, usage=None, include_usage=True, **extra):
    chunk = dict(C_HEAD, choices=choices, **extra)
    if include_usage:
        chunk["usage"] = usage
    return chunk


def c_delta(delta, finish=None, index=0):
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


C_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 12,
    "total_tokens": 2018,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}


def chat_text_stream(include_usage: bool) -> bytes:
    chunks = [
        c_chunk([c_delta({"role": "assistant", "content": "", "refusal": None})], include_usage=include_usage),
        c_chunk([c_delta({"content": "Hello"})], include_usage=include_usage, obfuscation="xyz"),
        c_chunk([c_delta({"content": ", wörld"})], include_usage=include_usage),
        c_chunk([c_delta({"content": " 🎉"})], include_usage=include_usage),
        c_chunk([c_delta({}, finish="stop")], include_usage=include_usage),
    ]
    if include_usage:
        chunks.append(c_chunk([], usage=C_USAGE))
    return data_only(*chunks, "[DONE]")


CHAT_TEXT_BODY = {
    "id": "chatcmpl-9x",
    "object": "chat.completion",
    "created": 1730000000,
    "model": "gpt-4.1-2025",
    "system_fingerprint": "fp_abc",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello, wörld 🎉"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
}


def test_chat_stream_with_include_usage():
    raw = chat_text_stream(include_usage=True)
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, raw)
    assert r.stream and r.complete and r.error is None and r.stop_reason == "stop"
    assert r.body == dict(CHAT_TEXT_BODY, usage=C_USAGE)
    assert r.usage.to_dict() == {"input": 2006, "output": 12, "cache_read": 1920, "cache_write": None}
    assert r.usage.semantics == "inclusive"
    assert r.event_count == 7
    assert_split_invariant(Api.OPENAI_CHAT, raw, r)


def test_chat_stream_without_include_usage_reports_no_usage():
    raw = chat_text_stream(include_usage=False)
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, raw)
    assert r.usage is None
    assert r.body == CHAT_TEXT_BODY and r.complete
    assert_split_invariant(Api.OPENAI_CHAT, raw, r, content_type=None)


def test_chat_parallel_tool_calls_merge_by_index():
    chunks = [
        c_chunk([c_delta({"role": "assistant", "content": None})]),
        c_chunk(
            [
                c_delta(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_A",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": ""},
                            }
                        ]
                    }
                )
            ]
        ),
        c_chunk([c_delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})]),
        c_chunk(
            [
                c_delta(
                    {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call_B",
                                "type": "function",
                                "function": {"name": "get_time", "arguments": ""},
                            }
                        ]
                    }
                )
            ]
        ),
        c_chunk([c_delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"tz": "UTC"}'}}]})]),
        c_chunk([c_delta({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]})]),
        c_chunk([c_delta({}, finish="tool_calls")]),
        c_chunk([], usage=C_USAGE),
    ]
    raw = data_only(*chunks, "[DONE]")
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, raw)
    msg = r.body["choices"][0]["message"]
    assert msg == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_A", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_B", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}},
        ],
    }
    assert r.stop_reason == "tool_calls" and r.complete
    assert_split_invariant(Api.OPENAI_CHAT, raw, r, step=2)


def test_chat_tool_calls_from_servers_that_omit_index_or_repeat_names():
    chunks = [
        c_chunk(
            [c_delta({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}}]})]
        ),
        c_chunk([c_delta({"tool_calls": [{"function": {"name": "f", "arguments": "}"}}]})]),
        c_chunk([c_delta({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "[]"}}]})]),
        c_chunk([c_delta({}, finish="tool_calls")]),
    ]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, data_only(*chunks, "[DONE]"))
    calls = r.body["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("c1", "f", "{}"),
        ("c2", "g", "[]"),
    ]


def test_chat_reasoning_content_and_multiple_choices():
    chunks = [
        c_chunk(
            [
                c_delta({"role": "assistant", "reasoning_content": "Think"}, index=0),
                c_delta({"role": "assistant", "content": "B1"}, index=1),
            ]
        ),
        c_chunk([c_delta({"reasoning_content": "ing..."}, index=0)]),
        c_chunk([c_delta({"content": "A"}, index=0), c_delta({"content": "B2"}, index=1, finish="length")]),
        c_chunk([c_delta({}, index=0, finish="stop")]),
    ]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, data_only(*chunks))  # no [DONE]: cut after the last choice finished
    assert r.complete and r.stop_reason == "stop"
    c0, c1 = r.body["choices"]
    assert c0["message"] == {"role": "assistant", "content": "A", "reasoning_content": "Thinking..."}
    assert c1["message"] == {"role": "assistant", "content": "B1B2"} and c1["finish_reason"] == "length"


def test_chat_logprobs_are_concatenated():
    def lp(tok):
        return {
            "content": [{"token": tok, "logprob": -0.1, "bytes": list(tok.encode()), "top_logprobs": []}],
            "refusal": None,
        }

    chunks = [
        c_chunk([dict(c_delta({"content": "a"}), logprobs=lp("a"))]),
        c_chunk([dict(c_delta({"content": "b"}, finish="stop"), logprobs=lp("b"))]),
    ]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, data_only(*chunks, "[DONE]"))
    assert [t["token"] for t in r.body["choices"][0]["logprobs"]["content"]] == ["a", "b"]


def test_chat_error_frame_after_content():
    chunks = [
        c_chunk([c_delta({"role": "assistant", "content": "Partial"})]),
        {"error": {"message": "The server had an error", "type": "server_error", "param": None, "code": None}},
    ]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, data_only(*chunks))
    assert r.error == {"message": "The server had an error", "type": "server_error", "param": None, "code": None}
    assert not r.complete and r.body["choices"][0]["message"]["content"] == "Partial"


def test_chat_error_event_frame():
    raw = b'event: error\ndata: {"message": "rate limited", "code": 429}\n\n'
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, raw)
    assert r.error == {"message": "rate limited", "code": 429} and r.body is None


def test_chat_truncated_streams():
    raw = chat_text_stream(include_usage=True)
    before_finish = raw[: raw.index(b'"finish_reason":"stop"')]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, before_finish)
    assert not r.complete and r.stop_reason is None and r.usage is None
    assert r.body["choices"][0]["message"]["content"] == "Hello, wörld 🎉"
    # Cut after the finish chunk but before the usage chunk: complete, usage not reported.
    after_finish = raw[: raw.index(b"\n\n", raw.index(b'"finish_reason":"stop"')) + 2]
    r = parse_response(Api.OPENAI_CHAT, 200, SSE, after_finish)
    assert r.complete and r.usage is None and r.stop_reason == "stop"
    for i in range(len(raw) + 1):
        parse_response(Api.OPENAI_CHAT, 200, SSE, raw[:i])


def test_chat_done_alone_is_not_anthropic_or_responses_completion():
    assert parse_response(Api.OPENAI_CHAT, 200, SSE, b"data: [DONE]\n\n").complete
    assert not parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, b"data: [DONE]\n\n").complete
    assert not parse_response(Api.OPENAI_RESPONSES, 200, SSE, b"data: [DONE]\n\n").complete


def test_chat_json_and_http_error():
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": C_USAGE,
    }
    r = parse_response(Api.OPENAI_CHAT, 200, "application/json", json.dumps(body).encode())
    assert r.body == body and r.stop_reason == "stop" and r.usage.cache_read == 1920 and r.complete
    err = {"error": {"message": "Rate limit reached", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
    r = parse_response(Api.OPENAI_CHAT, 429, "application/json", json.dumps(err).encode())
    assert r.error == err["error"] and r.usage is None


# --- OpenAI Responses -------------------------------------------------------------------------

R_BASE = {
    "id": "resp_67c",
    "object": "response",
    "created_at": 1741290958,
    "model": "gpt-5.1",
    "previous_response_id": None,
    "error": None,
    "incomplete_details": None,
}
R_REASONING = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan: greet."}]}
R_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Hi there!", "annotations": []}],
}
R_CALL = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_X",
    "name": "get_weather",
    "arguments": '{"city":"Oslo"}',
}
R_USAGE = {
    "input_tokens": 5000,
    "input_tokens_details": {"cached_tokens": 4096},
    "output_tokens": 80,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 5080,
}
R_FINAL = dict(R_BASE, status="completed", output=[R_REASONING, R_MESSAGE, R_CALL], usage=R_USAGE)


def r_events(terminal: str = "response.completed", final: dict = R_FINAL) -> list[dict]:
    pending = dict(R_BASE, status="in_progress", output=[], usage=None)
    ev = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Plan: ",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "greet.",
        },
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "text": "Plan: greet.",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": R_REASONING},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Hi",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": " there!",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "text": "Hi there!",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": R_MESSAGE["content"][0],
        },
        {"type": "response.output_item.done", "output_index": 1, "item": R_MESSAGE},
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {
                "id": "fc_1",
                "type": "function_call",
                "status": "in_progress",
                "call_id": "call_X",
                "name": "get_weather",
                "arguments": "",
            },
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '{"city":'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '"Oslo"}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 2,
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "response.output_item.done", "output_index": 2, "item": R_CALL},
        {"type": terminal, "response": final},
    ]
    for n, e in enumerate(ev):
        e["sequence_number"] = n
    return ev


def test_responses_stream_takes_the_terminal_response():
    raw = typed(*r_events())
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, raw)
    assert r.stream and r.complete and r.error is None
    assert r.body == R_FINAL and r.stop_reason == "completed"
    assert r.usage.to_dict() == {"input": 5000, "output": 80, "cache_read": 4096, "cache_write": None}
    assert r.usage.raw["output_tokens_details"]["reasoning_tokens"] == 64
    assert r.event_count == 21
    assert_split_invariant(Api.OPENAI_RESPONSES, raw, r, step=3)


@pytest.mark.parametrize(
    "cut_events, expected_output",
    [
        (0, None),
        (2, []),
        # cut while the message is streaming: reasoning is done, the message text is partial
        (
            11,
            [
                R_REASONING,
                {
                    "id": "msg_1",
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
                },
            ],
        ),
        # cut inside the function call arguments
        (
            17,
            [
                R_REASONING,
                R_MESSAGE,
                {
                    "id": "fc_1",
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": "call_X",
                    "name": "get_weather",
                    "arguments": '{"city":',
                },
            ],
        ),
        (20, [R_REASONING, R_MESSAGE, R_CALL]),
    ],
)
def test_responses_truncated_stream_is_rebuilt_from_items(cut_events, expected_output):
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, typed(*r_events()[:cut_events]))
    assert not r.complete and r.usage is None and r.stop_reason is None and r.error is None
    if expected_output is None:
        assert r.body is None
    else:
        assert r.body["output"] == expected_output
        assert r.body["id"] == "resp_67c" and r.body["status"] == "in_progress"


def test_responses_partial_item_without_part_event():
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "msg", "type": "message", "role": "assistant", "content": []},
        },
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "x"},
        {
            "type": "response.output_text.annotation.added",
            "output_index": 0,
            "content_index": 0,
            "annotation_index": 0,
            "annotation": {"type": "url_citation", "url": "https://e.x"},
        },
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 1, "delta": "no"},
    ]
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, typed(*events))
    assert r.body["output"][0]["content"] == [
        {"type": "output_text", "text": "x", "annotations": [{"type": "url_citation", "url": "https://e.x"}]},
        {"type": "refusal", "refusal": "no"},
    ]


def test_responses_failed():
    failed = dict(
        R_BASE,
        status="failed",
        output=[],
        usage=None,
        error={"code": "server_error", "message": "Something went wrong"},
    )
    events = r_events()[:12] + [{"type": "response.failed", "response": failed}]
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, typed(*events))
    assert r.complete and r.error == {"code": "server_error", "message": "Something went wrong"}
    assert r.stop_reason == "failed" and r.usage is None
    # The failed response has no output: what streamed before is kept.
    assert r.body["output"][1]["content"][0]["text"] == "Hi there!"


def test_responses_incomplete():
    final = dict(R_FINAL, status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, typed(*r_events("response.incomplete", final)))
    assert r.complete and r.error is None and r.stop_reason == "max_output_tokens" and r.usage.output == 80


def test_responses_error_event():
    events = r_events()[:5] + [
        {"type": "error", "code": "ERR_SOMETHING", "message": "Something happened", "param": None, "sequence_number": 5}
    ]
    r = parse_response(Api.OPENAI_RESPONSES, 200, SSE, typed(*events))
    assert r.error == {"code": "ERR_SOMETHING", "message": "Something happened", "param": None}
    assert not r.complete and r.body["output"][0]["summary"] == [{"type": "summary_text", "text": "Plan: "}]


def test_responses_json():
    r = parse_response(Api.OPENAI_RESPONSES, 200, "application/json", json.dumps(R_FINAL).encode())
    assert r.body == R_FINAL and r.complete and not r.stream and r.error is None
    assert r.usage.cache_read == 4096 and r.stop_reason == "completed"


# --- Gemini -----------------------------------------------------------------------------------

G_USAGE = {
    "promptTokenCount": 4000,
    "cachedContentTokenCount": 3000,
    "candidatesTokenCount": 20,
    "thoughtsTokenCount": 100,
    "totalTokenCount": 4120,
}
G_FRAMES = [
    {
        "candidates": [
            {"content": {"parts": [{"text": "Thinking about it", "thought": True}], "role": "model"}, "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 4000, "totalTokenCount": 4000},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    },
    {
        "candidates": [
            {"content": {"parts": [{"text": "The answer", "thoughtSignature": "c2ln"}], "role": "model"}, "index": 0}
        ],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    },
    {
        "candidates": [{"content": {"parts": [{"text": " is 42."}], "role": "model"}, "index": 0}],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    },
    {
        "candidates": [
            {
                "content": {"parts": [{"functionCall": {"name": "log", "args": {"n": 42}}}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": G_USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    },
]
G_BODY = {
    "modelVersion": "gemini-2.5-flash",
    "responseId": "r1",
    "usageMetadata": G_USAGE,
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Thinking about it", "thought": True},
                    {"text": "The answer is 42.", "thoughtSignature": "c2ln"},
                    {"functionCall": {"name": "log", "args": {"n": 42}}},
                ],
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
}


def test_gemini_sse_stream():
    raw = data_only(*G_FRAMES, eol="\r\n")
    r = parse_response(Api.GEMINI_GENERATE, 200, SSE, raw)
    assert r.stream and r.complete and r.error is None and r.stop_reason == "STOP"
    assert r.body == G_BODY
    assert r.usage.to_dict() == {"input": 4000, "output": 120, "cache_read": 3000, "cache_write": None}
    assert_split_invariant(Api.GEMINI_GENERATE, raw, r, step=2)


def test_gemini_stream_as_json_array_and_code_assist_wrapping():
    r = parse_response(Api.GEMINI_GENERATE, 200, "application/json", json.dumps(G_FRAMES).encode())
    assert r.stream and r.body == G_BODY and r.complete and r.event_count == 4 and r.usage.output == 120
    wrapped = data_only(*[{"response": f, "traceId": "t"} for f in G_FRAMES])
    assert parse_response(Api.GEMINI_GENERATE, 200, SSE, wrapped).body == G_BODY


def test_gemini_truncated_and_json():
    r = parse_response(Api.GEMINI_GENERATE, 200, SSE, data_only(*G_FRAMES[:2]))
    assert not r.complete and r.usage.input == 4000 and r.usage.output is None
    one = {
        "candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}, "finishReason": "MAX_TOKENS"}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 1, "totalTokenCount": 8},
    }
    r = parse_response(Api.GEMINI_GENERATE, 200, "application/json", json.dumps(one).encode())
    assert r.body == one and r.stop_reason == "MAX_TOKENS" and r.usage.to_dict()["input"] == 7
    r = parse_response(Api.GEMINI_GENERATE, 200, None, json.dumps({"response": one}).encode())
    assert r.body == one


def test_gemini_errors():
    err = [{"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}]
    r = parse_response(Api.GEMINI_GENERATE, 429, "application/json", json.dumps(err).encode())
    assert r.error == err[0]["error"]
    r = parse_response(Api.GEMINI_GENERATE, 200, SSE, data_only(G_FRAMES[0], err[0]))
    assert r.error == err[0]["error"] and not r.complete


# --- unknown APIs and malformed input ---------------------------------------------------------


def test_unknown_api_json_and_sse():
    r = parse_response(None, 200, "application/json", b'{"object": "list", "data": []}')
    assert r.body == {"object": "list", "data": []} and r.usage is None and r.error is None and r.complete
    r = parse_response(None, 200, "application/json", b'{"usage": {"prompt_tokens": 5}}')
    assert r.usage is None
    r = parse_response(None, 200, SSE, b"data: {}\n\ndata: {}\n\n")
    assert r.stream and r.body is None and r.event_count == 2 and r.complete
    assert not parse_response(None, 200, SSE, b"data: {}\n\ndata: {").complete
    assert parse_response(None, 200, "text/plain", b"hello").error is None
    assert parse_response(None, 204, None, b"") == ParsedResponse(False, None, None, None, True, 0, None)


@pytest.mark.parametrize("api", [Api.ANTHROPIC_MESSAGES, Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.GEMINI_GENERATE])
@pytest.mark.parametrize(
    "raw", [b"", b"<html>oops</html>", b'{"id": "msg_1", "content": [', b"\xff\xfe\x00", b"[1, 2", b"d", b"   "]
)
def test_malformed_bodies_are_reported_not_raised(api, raw):
    r = parse_response(api, 200, "application/json", raw)
    assert r.body is None and r.error["type"] == "unparseable" and not r.complete and r.usage is None


def test_http_error_with_a_non_json_body():
    r = parse_response(Api.OPENAI_CHAT, 502, "text/html", b"<html>Bad gateway</html>")
    assert r.error == {"type": "http_error", "status": 502, "message": "<html>Bad gateway</html>"}
    r = parse_response(Api.OPENAI_CHAT, 500, None, b"")
    assert r.error["type"] == "http_error" and r.error["status"] == 500


def test_deeply_nested_json_does_not_raise():
    raw = b"[" * 100000 + b"]" * 100000
    assert parse_response(Api.OPENAI_CHAT, 200, None, raw).error["type"] == "unparseable"
    raw = b"data: " + b"[" * 100000 + b"]" * 100000 + b"\n\n"
    assert parse_response(Api.OPENAI_CHAT, 200, SSE, raw).event_count == 1


def test_sse_body_with_json_content_type_is_sniffed():
    r = parse_response(Api.OPENAI_CHAT, 200, "application/json", chat_text_stream(include_usage=False))
    assert r.stream and r.body == CHAT_TEXT_BODY


def test_leading_whitespace_and_bom_before_json():
    r = parse_response(Api.OPENAI_CHAT, 200, None, b'\xef\xbb\xbf \n {"choices": []}')
    assert r.body == {"choices": []} and not r.stream


@pytest.mark.parametrize(
    "weird",
    [
        {"type": "content_block_delta", "index": "x", "delta": "text"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
        {"type": "content_block_start", "index": -3, "content_block": None},
        {"type": "message_delta", "delta": [1], "usage": "lots"},
        {"type": "message_start", "message": "hi"},
        {"choices": "nope", "usage": 5},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}, 7]}}]},
        {"choices": [{"index": True, "delta": None, "logprobs": "x"}]},
        {"type": "response.output_item.added", "output_index": 0, "item": "x"},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": ["x"]},
        {"type": "response.completed", "response": None},
        {"type": "response.content_part.added", "output_index": 9, "content_index": 0, "part": 3},
        {"candidates": [None, {"content": {"parts": [None, {"text": 3}]}}], "usageMetadata": []},
        {"candidates": "x"},
        [1, 2, 3],
        "just a string",
        None,
    ],
)
@pytest.mark.parametrize(
    "api", [Api.ANTHROPIC_MESSAGES, Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.GEMINI_GENERATE, None]
)
def test_wrong_shapes_inside_events_never_raise(api, weird):
    raw = frame("x", json.dumps(weird)).encode() + frame(None, {"type": "ping"}).encode()
    r = parse_response(api, 200, SSE, raw)
    assert r.event_count == 2


@pytest.mark.parametrize(
    "api, raw",
    [
        (Api.ANTHROPIC_MESSAGES, A_STREAM),
        (Api.OPENAI_CHAT, chat_text_stream(include_usage=True)),
        (Api.OPENAI_RESPONSES, typed(*r_events())),
        (Api.GEMINI_GENERATE, data_only(*G_FRAMES)),
    ],
)
def test_random_corruption_never_raises(api, raw):
    rng = random.Random(1234)
    alphabet = b'{}[]":,\n\r 0aZ\\\xff'
    for _ in range(300):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.choice(alphabet)
        r = parse_response(api, 200, rng.choice([SSE, None]), bytes(data))
        assert isinstance(r, ParsedResponse)


# --- incremental use --------------------------------------------------------------------------


def test_accumulator_result_mid_stream_then_continue():
    acc = StreamAccumulator(Api.ANTHROPIC_MESSAGES, status=200, content_type=SSE)
    cut = A_STREAM.index(b"event: content_block_stop")
    acc.feed(A_STREAM[:cut])
    mid = acc.result()
    assert not mid.complete and mid.body["content"][0]["thinking"].startswith("The user")
    acc.feed(A_STREAM[cut:])
    final = acc.result()
    assert final.complete and final.body == A_BODY
    assert acc.result() == final  # idempotent


def test_accumulator_one_byte_at_a_time():
    raw = typed(*r_events())
    acc = StreamAccumulator(Api.OPENAI_RESPONSES)
    for i in range(len(raw)):
        acc.feed(raw[i : i + 1])
    r = acc.result()
    assert r.stream and r.body == R_FINAL and r.complete


def test_accumulator_for_json_bodies():
    body = json.dumps({"type": "message", "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}).encode()
    acc = StreamAccumulator(Api.ANTHROPIC_MESSAGES, status=200, content_type="application/json")
    for i in range(len(body)):
        acc.feed(body[i : i + 1])
    r = acc.result()
    assert not r.stream and r.usage.input == 3 and r.complete


def test_accumulator_bom_split_before_json_and_repeated_results():
    acc = StreamAccumulator(Api.GEMINI_GENERATE, status=200)
    raw = b"\xef\xbb\xbf" + json.dumps(G_FRAMES).encode()
    for i in range(len(raw)):
        acc.feed(raw[i : i + 1])
    first = acc.result()
    assert first.body == G_BODY and first.event_count == 4
    assert acc.result() == first


def test_apis_we_do_not_know_get_no_usage_or_stop_reason():
    body = json.dumps({"usage": {"prompt_tokens": 5}, "stop_reason": "end_turn"}).encode()
    r = parse_response("u/custom", 200, "application/json", body)
    assert r.body is not None and r.usage is None and r.stop_reason is None
    r = parse_response("u/custom", 200, SSE, A_STREAM)
    assert r.stream and r.body is None and r.usage is None and r.complete and r.event_count == len(A_EVENTS)


# --- cross-check against the real SDKs' own stream accumulation, over loopback HTTP -------------


@contextlib.contextmanager
def serve(body: bytes, content_type: str = SSE):
    """A loopback server answering every POST with ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def comparable(x):
    """Drop nulls (SDK models fill every optional field) and the SDK's leftover tool_call index."""
    if isinstance(x, dict):
        return {k: comparable(v) for k, v in x.items() if v is not None and k != "index"}
    if isinstance(x, list):
        return [comparable(v) for v in x]
    return x


@pytest.mark.parametrize("events", [A_EVENTS, A_EVENTS[:12]], ids=["complete", "cut-after-text"])
def test_anthropic_matches_the_sdk_accumulation(events):
    raw = typed(*events)
    with serve(raw) as url:
        client = sdk_clients.Anthropic(api_key="sk-test", base_url=url, max_retries=0)
        with client.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as s:
            for _ in s:
                pass
            sdk = s.current_message_snapshot.to_dict()
    ours = parse_response(Api.ANTHROPIC_MESSAGES, 200, SSE, raw).body
    assert comparable(ours) == comparable(sdk)


@pytest.mark.parametrize("name", ["text", "tools", "choices"])
def test_chat_matches_the_sdk_accumulation(name):
    raw = {
        "text": chat_text_stream(include_usage=True),
        "tools": data_only(
            c_chunk([c_delta({"role": "assistant", "content": None})]),
            c_chunk(
                [
                    c_delta(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_A",
                                    "type": "function",
                                    "function": {"name": "a", "arguments": '{"x"'},
                                }
                            ]
                        }
                    )
                ]
            ),
            c_chunk(
                [
                    c_delta(
                        {
                            "tool_calls": [
                                {
                                    "index": 1,
                                    "id": "call_B",
                                    "type": "function",
                                    "function": {"name": "b", "arguments": "{}"},
                                }
                            ]
                        }
                    )
                ]
            ),
            c_chunk([c_delta({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]})]),
            c_chunk([c_delta({}, finish="tool_calls")]),
            "[DONE]",
        ),
        "choices": data_only(
            c_chunk(
                [
                    c_delta({"role": "assistant", "content": "A"}, index=0),
                    c_delta({"role": "assistant", "content": "B"}, index=1),
                ]
            ),
            c_chunk(
                [c_delta({"content": "a"}, index=0, finish="stop"), c_delta({"content": "b"}, index=1, finish="stop")]
            ),
            c_chunk([], usage=C_USAGE),
            "[DONE]",
        ),
    }[name]
    with serve(raw) as url:
        client = sdk_clients.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0)
        with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as s:
            sdk = s.get_final_completion().to_dict()
    ours = parse_response(Api.OPENAI_CHAT, 200, SSE, raw)
    assert comparable(ours.body) == comparable(sdk)
    assert ours.complete


def test_responses_matches_the_sdk_final_response():
    raw = typed(*r_events())
    with serve(raw) as url:
        client = sdk_clients.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0)
        with client.responses.stream(model="m", input="hi") as s:
            sdk = s.get_final_response().to_dict()
    assert comparable(parse_response(Api.OPENAI_RESPONSES, 200, SSE, raw).body) == comparable(sdk)
