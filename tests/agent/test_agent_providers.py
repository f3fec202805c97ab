"""Provider wire shapes and stream parsers (pure: no sockets), error classification, provider settings."""

from __future__ import annotations

import json

import pytest

from ctxscope.agent.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    tool_message,
    user_message,
)
from ctxscope.agent.core.model import (
    LENGTH,
    TOOL_USE,
    ContextOverflowError,
    ModelRequest,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSpec,
)
from ctxscope.agent.providers.anthropic import AnthropicStreamParser
from ctxscope.agent.providers.anthropic import build_body as anthropic_body
from ctxscope.agent.providers.catalog import ProviderConfigError, resolve
from ctxscope.agent.providers.openai_chat import ChatStreamParser
from ctxscope.agent.providers.openai_chat import build_body as chat_body
from ctxscope.agent.providers.openai_responses import ResponsesStreamParser
from ctxscope.agent.providers.openai_responses import build_body as responses_body
from ctxscope.agent.providers.retry import RetryPolicy, classify, parse_retry_after
from ctxscope.agent.providers.sse import SSEDecoder

TOOLS = (
    ToolSpec("read", "read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),
    ToolSpec("ls", "list", {"type": "object", "properties": {}}),
)
CALL = ToolCall("toolu_1", "read", {"path": "a"}, '{"path": "a"}')
HISTORY = (
    user_message("question"),
    Message(
        "assistant",
        (
            ThinkingBlock("plan", "sig-1", None, "anthropic"),
            ThinkingBlock("other api", source="openai-chat"),
            TextBlock(""),
            TextBlock("looking"),
            CALL,
        ),
    ),
    tool_message([ToolResult("toolu_1", "read", "contents", False), ToolResult("toolu_2", "ls", "bad", True)]),
    user_message("steer: hurry"),
)


def request(messages=HISTORY, tools=TOOLS):
    return ModelRequest("SYSTEM", tools, tuple(messages), 1000, {})


def parse(parser, sse: str):
    deltas = []
    dec = SSEDecoder()
    for ev in dec.feed(sse.encode()) + dec.close():
        parser.feed(ev, deltas.append)
    return parser.finish(), deltas


def frames(*events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


# --- Anthropic ----------------------------------------------------------------------------------


def test_anthropic_body_breakpoints_merging_and_thinking():
    body = anthropic_body(request(), "claude-x")
    assert body["system"] == [{"type": "text", "text": "SYSTEM", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in body["tools"][0] and body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]  # tool results + steer merged
    assert msgs[1]["content"] == [
        {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
        {"type": "text", "text": "looking"},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
    ]
    last = msgs[2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert last[1]["is_error"] is True and "is_error" not in last[0]
    assert last[-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(body).count("cache_control") == 3
    assert body["stream"] is True and body["max_tokens"] == 1000


def test_anthropic_thinking_is_requested_when_configured():
    assert anthropic_body(request(), "m", thinking_budget=2048)["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2048,
    }


ANTHROPIC_STREAM = frames(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-x",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 5,
                "output_tokens": 1,
            },
        },
    },
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "let me"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " there"}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {}},
    },
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"pa'}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": 'th": "x"}'}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}},
    {"type": "message_stop"},
)


def test_anthropic_stream():
    resp, deltas = parse(AnthropicStreamParser(), ANTHROPIC_STREAM)
    assert resp.message.content == (
        ThinkingBlock("let me", "SIG", None, "anthropic"),
        TextBlock("Hello there"),
        ToolCall("toolu_9", "read", {"path": "x"}),
    )
    assert resp.stop_reason == TOOL_USE and resp.response_id == "msg_1"
    u = resp.usage
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (115, 100, 5, 42)
    assert deltas == [
        ThinkingDelta("let me"),
        TextDelta("Hello"),
        TextDelta(" there"),
        ToolCallDelta("toolu_9", "read"),
    ]


def test_anthropic_stream_failures():
    with pytest.raises(ProviderError) as e:
        parse(AnthropicStreamParser(), ANTHROPIC_STREAM.split("event: message_stop")[0])
    assert e.value.retryable and e.value.kind == "incomplete_stream"
    err = frames(
        {"type": "message_start", "message": {"usage": {}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    with pytest.raises(ProviderError) as e:
        parse(AnthropicStreamParser(), err)
    assert e.value.retryable and e.value.kind == "overloaded_error"
    bad = frames(
        {"type": "message_start", "message": {"usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "ls"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{oops"}},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}},
        {"type": "message_stop"},
    )
    resp, _ = parse(AnthropicStreamParser(), bad)
    assert resp.message.tool_calls[0].invalid_arguments and resp.stop_reason == LENGTH


# --- OpenAI Chat Completions --------------------------------------------------------------------


def test_chat_body():
    body = chat_body(request(), "gpt-x")
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "SYSTEM"}
    assert msgs[2] == {
        "role": "assistant",
        "content": "looking",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}
        ],
    }
    assert msgs[3:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "contents"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "bad"},
        {"role": "user", "content": "steer: hurry"},
    ]
    assert body["stream_options"] == {"include_usage": True} and body["max_completion_tokens"] == 1000
    assert body["tools"][0] == {
        "type": "function",
        "function": {"name": "read", "description": "read a file", "parameters": TOOLS[0].parameters},
    }
    assert "max_tokens" in chat_body(request(), "m", max_tokens_field="max_tokens")


def chat_chunks(*chunks):
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_chat_stream_with_parallel_tool_calls_and_usage():
    sse = chat_chunks(
        {"id": "c1", "model": "gpt-x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_a",
                                "type": "function",
                                "function": {"name": "read", "arguments": ""},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call_b",
                                "type": "function",
                                "function": {"name": "ls", "arguments": "{}"},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}}],
        },
        {
            "id": "c1",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"a"}'}}]}}],
        },
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": None},
        {
            "id": "c1",
            "choices": [],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 1024}},
        },
    )
    resp, deltas = parse(ChatStreamParser(), sse)
    assert resp.message.text == "Hi" and resp.stop_reason == TOOL_USE
    assert resp.message.tool_calls == (
        ToolCall("call_a", "read", {"path": "a"}, '{"path":"a"}'),
        ToolCall("call_b", "ls", {}, "{}"),
    )
    assert (resp.usage.input_tokens, resp.usage.cache_read_tokens, resp.usage.output_tokens) == (2000, 1024, 9)
    assert deltas[0] == TextDelta("Hi") and ToolCallDelta("call_b", "ls") in deltas


def test_chat_stream_failures():
    with pytest.raises(ProviderError) as e:
        parse(ChatStreamParser(), 'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
    assert e.value.retryable
    with pytest.raises(ContextOverflowError):
        parse(ChatStreamParser(), 'data: {"error": {"message": "too long", "code": "context_length_exceeded"}}\n\n')
    resp, _ = parse(
        ChatStreamParser(),
        chat_chunks({"choices": [{"index": 0, "delta": {"content": "cut"}, "finish_reason": "length"}]}),
    )
    assert resp.stop_reason == LENGTH and resp.usage is None


# --- OpenAI Responses ---------------------------------------------------------------------------


def test_responses_body():
    body = responses_body(request(), "gpt-x")
    assert body["instructions"] == "SYSTEM" and body["store"] is False and body["max_output_tokens"] == 1000
    assert body["input"] == [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "looking"},
        {"type": "function_call", "call_id": "toolu_1", "name": "read", "arguments": '{"path": "a"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "contents"},
        {"type": "function_call_output", "call_id": "toolu_2", "output": "bad"},
        {"role": "user", "content": "steer: hurry"},
    ]
    assert body["tools"][1] == {
        "type": "function",
        "name": "ls",
        "description": "list",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }


def test_responses_stream():
    sse = frames(
        {"type": "response.created", "response": {"id": "resp_1"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []},
        },
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "thinking"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "message", "id": "msg_1", "content": []},
        },
        {"type": "response.output_text.delta", "output_index": 1, "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 1, "delta": "lo"},
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {"type": "message", "content": [{"type": "output_text", "text": "Hello"}]},
        },
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"path":"a"}'},
        {
            "type": "response.output_item.done",
            "output_index": 2,
            "item": {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": '{"path":"a"}'},
        },
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "model": "gpt-x",
                "usage": {"input_tokens": 3000, "output_tokens": 20, "input_tokens_details": {"cached_tokens": 2048}},
            },
        },
    )
    resp, deltas = parse(ResponsesStreamParser(), sse)
    assert resp.message.content == (
        ThinkingBlock("thinking", source="openai-responses"),
        TextBlock("Hello"),
        ToolCall("call_1", "read", {"path": "a"}, '{"path":"a"}'),
    )
    assert resp.stop_reason == TOOL_USE and (resp.usage.input_tokens, resp.usage.cache_read_tokens) == (3000, 2048)
    assert deltas == [ThinkingDelta("thinking"), TextDelta("Hel"), TextDelta("lo"), ToolCallDelta("call_1", "read")]


def test_responses_incomplete_and_failed():
    resp, _ = parse(
        ResponsesStreamParser(),
        frames(
            {"type": "response.output_text.delta", "output_index": 0, "delta": "partial"},
            {"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"}}},
        ),
    )
    assert resp.stop_reason == LENGTH and resp.message.text == "partial"
    with pytest.raises(ContextOverflowError):
        parse(
            ResponsesStreamParser(),
            frames(
                {
                    "type": "response.failed",
                    "response": {
                        "error": {"code": "context_length_exceeded", "message": "Your input exceeds the context window"}
                    },
                }
            ),
        )
    with pytest.raises(ProviderError) as e:
        parse(ResponsesStreamParser(), frames({"type": "response.created", "response": {}}))
    assert e.value.retryable


# --- errors and settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,kind,message,overflow,retryable",
    [
        (400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", True, False),
        (400, "context_length_exceeded", "", True, False),
        (413, "request_too_large", "Request exceeds the maximum size", True, False),
        (429, "rate_limit_error", "slow down", False, True),
        (529, "overloaded_error", "Overloaded", False, True),
        (503, None, "", False, True),
        (400, "invalid_request_error", "messages: field required", False, False),
        (401, "authentication_error", "invalid x-api-key", False, False),
        (None, "overloaded_error", "Overloaded", False, True),
    ],
)
def test_classify(status, kind, message, overflow, retryable):
    e = classify(status, kind, message)
    assert isinstance(e, ContextOverflowError) == overflow and e.retryable == retryable


def test_retry_delays():
    p = RetryPolicy(base_delay=1.0, max_delay=10.0)
    assert 0.75 <= p.delay(1, ProviderError("x")) <= 1.25 and 3.0 <= p.delay(3, ProviderError("x")) <= 5.0
    assert p.delay(9, ProviderError("x")) == 10.0
    assert (
        p.delay(1, ProviderError("x", retry_after=3.0)) == 3.0
        and p.delay(1, ProviderError("x", retry_after=99)) == 10.0
    )
    assert parse_retry_after("2") == 2.0 and parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_resolve_routes_through_the_proxy_by_default():
    env = {"ANTHROPIC_API_KEY": "sk-ant", "OPENAI_API_KEY": "sk-oa"}
    a = resolve("anthropic", env=env)
    assert (a.base_url, a.api, a.api_key, a.context_window) == (
        "http://127.0.0.1:8787/anthropic",
        "anthropic",
        "sk-ant",
        200_000,
    )
    assert "sk-ant" not in repr(a)
    assert resolve("openai", env=env).base_url == "http://127.0.0.1:8787/openai/v1"
    assert resolve("openai-responses", env=env).api == "openai-responses"
    assert resolve("sim", env={}).base_url == "http://127.0.0.1:8787/u/sim/v1"
    assert resolve("sim", api="anthropic", env={}).base_url == "http://127.0.0.1:8787/u/sim"
    assert resolve("sim", proxy="http://127.0.0.1:9999/", env={}).base_url == "http://127.0.0.1:9999/u/sim/v1"
    assert resolve("openai", direct=True, env=env).base_url == "https://api.openai.com/v1"
    d = resolve("sim", direct=True, base_url="http://127.0.0.1:5/v1", env={})
    assert d.base_url == "http://127.0.0.1:5/v1" and not d.via_proxy
    assert resolve("openai", model="gpt-4o", max_output_tokens=500, env=env).max_output_tokens == 500
    with pytest.raises(ProviderConfigError, match="ANTHROPIC_API_KEY"):
        resolve("anthropic", env={})
    with pytest.raises(ProviderConfigError, match="--base-url"):
        resolve("sim", direct=True, env={})
