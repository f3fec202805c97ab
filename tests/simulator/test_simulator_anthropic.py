"""The simulator's Anthropic Messages API, judged by the real anthropic SDK (sync and async)."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from ctxscope.vocab.tokens import count_tokens

from support import sdk_clients

MODEL = "claude-sim"  # default 1024-token cache minimum
LONG = " ".join(["hello"] * 1500)  # exactly 1500 tokens


@pytest.fixture
def client(sim_alone):
    return sdk_clients.Anthropic(base_url=sim_alone.base_url, api_key="sk-ant-test", max_retries=0)


def ask(client, text="hello", **kw):
    return client.messages.create(
        model=kw.pop("model", MODEL), max_tokens=256, messages=[{"role": "user", "content": text}], **kw
    )


def test_text_reply_and_usage(sim_alone, client):
    sim_alone.state.set_script([{"text": "Hi there, how can I help?"}])
    msg = ask(client, "hello world")
    assert msg.id.startswith("msg_01") and msg.role == "assistant" and msg.model == MODEL
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "Hi there, how can I help?"
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens == count_tokens("hello world")
    assert msg.usage.output_tokens == count_tokens("Hi there, how can I help?")
    assert (msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens) == (0, 0)
    assert msg._request_id.startswith("req_01")


def test_default_reply_when_queue_is_empty(client):
    assert ask(client, "tell me about caches").content[0].text == "sim: tell me about caches"


def test_parallel_tool_calls_with_thinking_streamed(sim_alone, client):
    sim_alone.state.set_script(
        [
            {
                "thinking": "I should read both files.",
                "text": "Reading them.",
                "tool_calls": [
                    {"name": "read", "arguments": {"path": "a.py"}},
                    {"name": "read", "arguments": {"path": "b.py", "limit": 20}},
                ],
            }
        ]
    )
    with client.messages.stream(model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "go"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[0].thinking == "I should read both files." and final.content[0].signature
    assert [b.input for b in final.content[2:]] == [{"path": "a.py"}, {"path": "b.py", "limit": 20}]
    assert all(b.id.startswith("toolu_01") for b in final.content[2:]) and final.content[2].id != final.content[3].id
    assert final.stop_reason == "tool_use"
    assert kinds.count("input_json") >= 4  # arguments arrive in several partial fragments
    assert final.usage.output_tokens == count_tokens("I should read both files.") + count_tokens(
        "Reading them."
    ) + 2 * count_tokens("read") + count_tokens('{"path":"a.py"}') + count_tokens('{"path":"b.py","limit":20}')


def test_raw_stream_event_order(sim_alone, client):
    sim_alone.state.set_script(
        [{"text": "one two three four five six seven", "tool_calls": [{"name": "ls", "arguments": {"d": "."}}]}]
    )
    stream = client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}], stream=True
    )
    kinds = [(e.type, getattr(e, "index", None)) for e in stream]
    names = [k for k, _ in kinds]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1:3] == ["content_block_start", "content_block_delta"]  # the SDK hides ping
    assert names.count("content_block_start") == names.count("content_block_stop") == 2
    assert [i for k, i in kinds if k == "content_block_start"] == [0, 1]


def test_empty_answer(sim_alone, client):
    sim_alone.state.set_script([{"empty": True}, {"empty": True}])
    msg = ask(client)
    assert msg.content == [] and msg.stop_reason == "end_turn" and msg.usage.output_tokens == 0
    with client.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]) as stream:
        assert stream.get_final_message().content == []


def test_max_tokens_stop_reason(sim_alone, client):
    sim_alone.state.set_script([{"text": "cut short", "stop_reason": "max_tokens"}])
    assert ask(client).stop_reason == "max_tokens"


@pytest.mark.parametrize(
    ("status", "exc", "etype"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (400, anthropic.BadRequestError, "invalid_request_error"),
    ],
)
def test_errors_raise_the_sdk_classes(sim_alone, client, status, exc, etype):
    sim_alone.state.set_script([{"error": {"status": status, "message": "scripted failure", "retry_after": 7}}])
    with pytest.raises(exc) as info:
        ask(client)
    assert info.value.status_code == status
    assert info.value.body == {"type": "error", "error": {"type": etype, "message": "scripted failure"}}
    assert info.value.response.headers["retry-after"] == "7"
    assert ask(client, "after").content[0].text == "sim: after"  # the error consumed its step


def test_context_overflow_keeps_the_step_for_a_shorter_prompt(sim_alone, client):
    sim_alone.state.set_script([{"text": "fits now", "context_window": 50}])
    with pytest.raises(anthropic.BadRequestError) as info:
        ask(client, " ".join(["hello"] * 60))
    assert info.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 60 tokens > 50 maximum",
    }
    assert ask(client, "short").content[0].text == "fits now"
    sim_alone.state.context_window = 10
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long: 11 tokens > 10 maximum"):
        ask(client, " ".join(["hello"] * 11))


def test_stream_error_after_content(sim_alone, client):
    sim_alone.state.set_script(
        [
            {
                "text": "partial answer that is long enough",
                "stream_error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"},
            }
        ]
    )
    seen = []
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]) as stream,
    ):
        for text in stream.text_stream:
            seen.append(text)
    assert seen and "".join(seen) != "partial answer that is long enough"
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    sim_alone.state.set_script([{"stream_error": {"status": 529, "type": "overloaded_error"}}])
    with pytest.raises(anthropic.OverloadedError):  # not streaming: a plain HTTP error
        ask(client)


def test_mid_stream_reset_breaks_the_sdk_stream(sim_alone, client):
    sim_alone.state.set_script([{"text": "a b c d e f g h i j k l", "reset_after_events": 4}])
    with (
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)),
        client.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]) as stream,
    ):
        stream.get_final_message()
    sim_alone.state.set_script([{"text": "whole body never arrives", "reset_after_events": 0}])
    with pytest.raises((httpx2.HTTPError, anthropic.APIConnectionError)):
        ask(client)


def test_delays(sim_alone, client):
    sim_alone.state.set_script([{"text": "slow", "delay_ms": 1500}, {"text": "a b c d e f", "chunk_delay_ms": 5}])
    impatient = client.with_options(timeout=0.2)
    with pytest.raises(anthropic.APITimeoutError):
        ask(impatient)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]) as stream:
        assert stream.get_final_message().content[0].text == "a b c d e f"


def _cached_call(client, system_ttl=None, stream=False, model=MODEL):
    cc = {"type": "ephemeral", **({"ttl": system_ttl} if system_ttl else {})}
    kwargs = {
        "model": model,
        "max_tokens": 64,
        "system": [{"type": "text", "text": LONG, "cache_control": cc}],
        "messages": [{"role": "user", "content": "question"}],
    }
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message().usage
    return client.messages.create(**kwargs).usage


def test_prompt_cache_write_then_read(client):
    first = _cached_call(client)
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens, first.input_tokens) == (1500, 0, 1)
    assert (first.cache_creation.ephemeral_5m_input_tokens, first.cache_creation.ephemeral_1h_input_tokens) == (1500, 0)
    second = _cached_call(client, stream=True)
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens, second.input_tokens) == (0, 1500, 1)


def test_prompt_cache_below_minimum_and_other_key(sim_alone, client):
    usage = _cached_call(client, model="claude-sonnet-4-6")  # minimum 2048 > 1500
    usage = _cached_call(client, model="claude-sonnet-4-6")
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens, usage.input_tokens) == (0, 0, 1501)
    _cached_call(client)
    other = sdk_clients.Anthropic(base_url=sim_alone.base_url, api_key="sk-ant-other", max_retries=0)
    assert _cached_call(other).cache_read_input_tokens == 0


def test_prompt_cache_ttl_with_injected_clock(sim_alone, client):
    now = [1000.0]
    sim_alone.state.clock = lambda: now[0]
    _cached_call(client)
    now[0] += 299
    assert _cached_call(client).cache_read_input_tokens == 1500
    now[0] += 301
    expired = _cached_call(client)
    assert (expired.cache_read_input_tokens, expired.cache_creation_input_tokens) == (0, 1500)
    upgraded = _cached_call(client, system_ttl="1h")  # same prefix: a read, now kept for an hour
    assert (upgraded.cache_read_input_tokens, upgraded.cache_creation.ephemeral_1h_input_tokens) == (1500, 0)
    now[0] += 1800
    assert _cached_call(client).cache_read_input_tokens == 1500
    sim_alone.state.reset()
    hour = _cached_call(client, system_ttl="1h")
    assert (hour.cache_creation.ephemeral_1h_input_tokens, hour.cache_creation.ephemeral_5m_input_tokens) == (1500, 0)


def test_top_level_cache_control_and_breakpoint_limit(client):
    kwargs = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": LONG}]}
    extra = {"cache_control": {"type": "ephemeral"}}
    assert client.messages.create(**kwargs, extra_body=extra).usage.cache_creation_input_tokens == 1500
    assert client.messages.create(**kwargs, extra_body=extra).usage.cache_read_input_tokens == 1500
    marked = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
        client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": marked}])


def test_count_tokens(client):
    counted = client.messages.count_tokens(
        model=MODEL, system="be brief", messages=[{"role": "user", "content": "hello world"}]
    )
    assert counted.input_tokens == count_tokens("be brief") + count_tokens("hello world")


async def test_async_client_streams_and_creates(sim_alone):
    sim_alone.state.set_script([{"text": "async hello"}, {"tool_calls": [{"name": "ls", "arguments": {}}]}])
    client = anthropic.AsyncAnthropic(base_url=sim_alone.base_url, api_key="k", max_retries=0)
    async with client.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]
    ) as stream:
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts) == final.content[0].text == "async hello"
    msg = await client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}])
    assert msg.content[0].type == "tool_use" and msg.content[0].input == {}
    await client.close()
