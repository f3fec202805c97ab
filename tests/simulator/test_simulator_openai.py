"""The simulator's OpenAI Chat Completions and Responses APIs, judged by the real openai SDK."""

from __future__ import annotations

import json

import openai
import pytest

from ctxscope.vocab.tokens import count_tokens

from support import sdk_clients

MODEL = "gpt-4o"
LONG = " ".join(["hello"] * 1500)  # exactly 1500 tokens
TOOLS = [
    {
        "type": "function",
        "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    }
]
PARALLEL = [{"name": "read", "arguments": {"path": "a.py"}}, {"name": "read", "arguments": {"path": "b.py"}}]


@pytest.fixture
def client(sim_alone):
    return sdk_clients.OpenAI(base_url=sim_alone.base_url + "/v1", api_key="sk-test", max_retries=0)


def chat(client, text="hello", **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kw)


# ---------------------------------------------------------------- Chat Completions


def test_chat_text_and_usage(sim_alone, client):
    sim_alone.state.set_script([{"text": "Hello back."}])
    done = chat(client, "hello world")
    assert done.id.startswith("chatcmpl-") and done.object == "chat.completion"
    assert done.choices[0].message.content == "Hello back." and done.choices[0].finish_reason == "stop"
    assert done.usage.prompt_tokens == count_tokens("hello world")
    assert done.usage.completion_tokens == count_tokens("Hello back.")
    assert done.usage.prompt_tokens_details.cached_tokens == 0
    assert chat(client, "anything else").choices[0].message.content == "sim: anything else"


def test_chat_parallel_tool_calls_with_stream_helper(sim_alone, client):
    sim_alone.state.set_script([{"text": "Reading.", "tool_calls": PARALLEL}])
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "go"}], tools=TOOLS
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Reading." and final.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("read", '{"path":"a.py"}'),
        ("read", '{"path":"b.py"}'),
    ]
    assert [c.index for c in message.tool_calls] == [0, 1]
    assert all(c.id.startswith("call_") for c in message.tool_calls)
    assert kinds.count("tool_calls.function.arguments.delta") >= 4
    assert final.usage is None  # no stream_options.include_usage: no usage at all


def test_chat_raw_stream_usage_chunk_only_when_asked(sim_alone, client):
    sim_alone.state.set_script([{"text": "one two three four"}, {"text": "one two three four"}])
    plain = list(chat(client, stream=True))
    assert all(c.usage is None for c in plain)
    assert plain[0].choices[0].delta.role == "assistant" and plain[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "one two three four"
    with_usage = list(chat(client, stream=True, stream_options={"include_usage": True}))
    assert with_usage[-1].choices == [] and with_usage[-1].usage.completion_tokens == count_tokens("one two three four")
    assert all(c.usage is None for c in with_usage[:-1])


def test_chat_empty_and_length(sim_alone, client):
    sim_alone.state.set_script([{"empty": True}, {"text": "cut", "stop_reason": "length"}])
    empty = chat(client)
    assert empty.choices[0].message.content == "" and not empty.choices[0].message.tool_calls
    assert chat(client).choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("status", "exc", "etype", "code"),
    [
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error", None),
        (401, openai.AuthenticationError, "invalid_request_error", "invalid_api_key"),
    ],
)
def test_chat_errors(sim_alone, client, status, exc, etype, code):
    sim_alone.state.set_script([{"error": {"status": status, "message": "scripted"}}])
    with pytest.raises(exc) as info:
        chat(client)
    assert info.value.body == {"message": "scripted", "type": etype, "param": None, "code": code}
    assert info.value.response.headers["x-request-id"].startswith("req_")


def test_chat_context_overflow(sim_alone, client):
    sim_alone.state.context_window = 10
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, " ".join(["hello"] * 11))
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"
    assert "maximum context length is 10 tokens" in info.value.message and "resulted in 11 tokens" in info.value.message


def test_chat_stream_error_reset_and_delay(sim_alone, client):
    sim_alone.state.set_script(
        [
            {"text": "some words before failing", "stream_error": {"status": 500, "message": "boom"}},
            {"text": "a b c d e f g h", "reset_after_events": 2},
            {"text": "late", "delay_ms": 1500},
        ]
    )
    got = []
    with pytest.raises(openai.APIError, match="boom"):
        for chunk in chat(client, stream=True):
            got.append(chunk)
    assert got and got[-1].choices[0].delta.content
    with pytest.raises(openai.APIConnectionError):
        list(chat(client, stream=True))
    with pytest.raises(openai.APITimeoutError):
        chat(client.with_options(timeout=0.2))


def test_chat_automatic_prefix_cache(sim_alone, client):
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "question"}]
    first = client.chat.completions.create(model=MODEL, messages=messages)
    assert (first.usage.prompt_tokens, first.usage.prompt_tokens_details.cached_tokens) == (1501, 0)
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    usage = list(stream)[-1].usage
    assert usage.prompt_tokens == 1501 and usage.prompt_tokens_details.cached_tokens == 1408
    assert usage.prompt_tokens_details.cached_tokens % 128 == 0
    short = [{"role": "user", "content": "tiny"}]
    client.chat.completions.create(model=MODEL, messages=short)
    assert client.chat.completions.create(model=MODEL, messages=short).usage.prompt_tokens_details.cached_tokens == 0


# ---------------------------------------------------------------- Responses


def test_responses_text_and_usage(sim_alone, client):
    sim_alone.state.set_script([{"text": "Hello from responses."}])
    resp = client.responses.create(model="gpt-5", instructions="be brief", input="hello world")
    assert resp.id.startswith("resp_") and resp.status == "completed"
    assert resp.output_text == "Hello from responses." and resp.output[0].id.startswith("msg_")
    assert resp.usage.input_tokens == count_tokens("be brief") + count_tokens("hello world")
    assert resp.usage.output_tokens == count_tokens("Hello from responses.")
    assert resp.usage.input_tokens_details.cached_tokens == 0


def test_responses_stream_helper_with_reasoning_and_parallel_calls(sim_alone, client):
    sim_alone.state.set_script([{"thinking": "plan first", "text": "Reading.", "tool_calls": PARALLEL}])
    with client.responses.stream(model="gpt-5", input="go") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output[0].summary[0].text == "plan first" and final.output_text == "Reading."
    calls = final.output[2:]
    assert [(c.name, c.arguments) for c in calls] == [("read", '{"path":"a.py"}'), ("read", '{"path":"b.py"}')]
    assert all(c.call_id.startswith("call_") and c.id.startswith("fc_") for c in calls)
    assert final.usage.output_tokens_details.reasoning_tokens == count_tokens("plan first")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert types.count("response.function_call_arguments.done") == 2


def test_responses_incomplete_failed_and_overflow(sim_alone, client):
    sim_alone.state.set_script(
        [
            {"text": "cut", "stop_reason": "max_output_tokens"},
            {"text": "text before failure", "stream_error": {"status": 500, "message": "went wrong"}},
        ]
    )
    incomplete = client.responses.create(model="gpt-5", input="x")
    assert incomplete.status == "incomplete" and incomplete.incomplete_details.reason == "max_output_tokens"
    events = list(client.responses.create(model="gpt-5", input="x", stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.error.message == "went wrong"
    assert any(e.type == "response.output_text.delta" for e in events)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    sim_alone.state.context_window = 5
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-5", input=" ".join(["hello"] * 6))
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "input")


def test_responses_previous_response_id_and_cache(sim_alone, client):
    sim_alone.state.set_script([{"tool_calls": [{"name": "read", "arguments": {"path": "a.py"}}]}, {"text": "done"}])
    first = client.responses.create(model="gpt-5", input=LONG)
    call = first.output[0]
    follow = client.responses.create(
        model="gpt-5",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "file text"}],
    )
    expected = 1500 + count_tokens(call.arguments) + count_tokens("file text")
    assert follow.usage.input_tokens == expected and follow.output_text == "done"
    assert follow.usage.input_tokens_details.cached_tokens == 1408  # the earlier prompt's 128-token boundaries
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-5", previous_response_id="resp_unknown", input="x")
    assert info.value.code == "previous_response_not_found"


async def test_async_openai_clients(sim_alone):
    sim_alone.state.set_script([{"text": "async chat"}, {"text": "async responses"}])
    client = openai.AsyncOpenAI(base_url=sim_alone.base_url + "/v1", api_key="k", max_retries=0)
    async with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "x"}]) as stream:
        final = await stream.get_final_completion()
    assert final.choices[0].message.content == "async chat"
    async with client.responses.stream(model="gpt-5", input="x") as rstream:
        assert (await rstream.get_final_response()).output_text == "async responses"
    await client.close()


def test_the_simulated_agent_drives_codex_code_mode_through_its_free_form_exec_tool(sim_alone, client):
    """Codex 0.171 declares its tools in an ``additional_tools`` input item, grouped in namespaces,
    and runs shell commands through one custom (free-form) tool, ``exec``, whose JavaScript calls
    ``tools.exec_command``. The simulated agent answers with a custom_tool_call the SDK parses,
    streamed and not, reads the custom_tool_call_output, and finishes with a final answer."""
    exec_tool = {"type": "custom", "name": "exec", "description": "Run JavaScript; `tools.exec_command(...)`"}
    namespace = {"type": "namespace", "name": "functions", "tools": [exec_tool, {"type": "function", "name": "wait"}]}
    task = "list the files in this folder, then run `echo hello` and tell me"
    items: list = [
        {"type": "additional_tools", "role": "developer", "tools": [namespace]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
    ]
    inputs = []
    for turn in range(4):
        if turn % 2:
            response = client.responses.create(model="gpt-5", input=items)
        else:
            with client.responses.stream(model="gpt-5", input=items) as stream:
                deltas = "".join(e.delta for e in stream if e.type == "response.custom_tool_call_input.delta")
                response = stream.get_final_response()
        calls = [item for item in response.output if item.type == "custom_tool_call"]
        if not calls:
            break
        [call] = calls
        assert call.name == "exec" and (turn % 2 or deltas == call.input)
        inputs.append(call.input)
        printed = "README.md\n" if '"cmd": "ls"' in call.input else "hello\n"  # as Codex's exec answers
        output = "Script completed\nOutput:\n" + json.dumps({"output": printed, "exit_code": 0})
        items += [
            {"type": "custom_tool_call", "call_id": call.call_id, "name": "exec", "input": call.input},
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": output},
        ]
    assert inputs == [
        'text(await tools.exec_command({"cmd": "ls"}))',
        'text(await tools.exec_command({"cmd": "echo hello"}))',
    ]
    assert "1 entries: README.md" in response.output_text
    assert "`echo hello` exited with code 0; it printed: hello" in response.output_text
