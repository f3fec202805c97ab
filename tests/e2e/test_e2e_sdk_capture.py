"""The real openai and anthropic SDKs, through the real daemon, to the simulator.

The client must read exactly the bytes the upstream wrote, and the capture must hold them and the
usage the provider reported.
"""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest

from ctxscope.inspector.store.queries import get_call, get_response_raw, open_db
from ctxscope.inspector.writer.wire.messages import Handover

from support.sdk_taps import AsyncRecordingTransport, RecordingTransport

KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture
def tap():
    """The client's transport, recording the bytes it reads; closed after the test with its connections."""
    transport = RecordingTransport()
    yield transport
    transport.close()


@pytest.fixture
async def atap():
    transport = AsyncRecordingTransport()
    yield transport
    await transport.aclose()


def _anthropic(proxy, transport):
    return anthropic.Anthropic(
        api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def _openai(proxy, transport):
    return openai.OpenAI(
        api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def _assert_same_bytes(sim, transport, proxy, row):
    upstream_wrote = bytes(sim.written[-1])
    client_read = bytes(transport.bodies[-1])
    assert client_read == upstream_wrote
    assert get_response_raw(open_db(proxy.db_path), row["id"]) == upstream_wrote


def test_anthropic_sync_non_stream(proxy, sim, tap):
    sim.state().set_script([{"text": "Hello from the simulator."}])
    msg = _anthropic(proxy, tap).messages.create(
        model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    assert msg.content[0].text == "Hello from the simulator."
    [row] = proxy.wait_for_calls(1)
    _assert_same_bytes(sim, tap, proxy, row)
    assert row["api"] == "anthropic.messages" and row["model"] == "claude-sonnet-4-6"
    assert row["outcome"] == "ok" and row["status"] == 200 and row["stream"] is False
    u = msg.usage
    assert row["usage"] == {
        "input": u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0),
        "output": u.output_tokens,
        "cache_read": u.cache_read_input_tokens or 0,
        "cache_write": u.cache_creation_input_tokens or 0,
    }


def test_anthropic_sync_stream_with_cache_hit(proxy, sim, tap):
    client = _anthropic(proxy, tap)
    system = [{"type": "text", "text": "You are a careful assistant. " * 600, "cache_control": {"type": "ephemeral"}}]
    finals = []
    for i in range(2):
        sim.state().set_script([{"text": f"answer {i}"}])
        with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=50, system=system, messages=[{"role": "user", "content": "question"}]
        ) as stream:
            finals.append(stream.get_final_message())
    rows = proxy.wait_for_calls(2)
    _assert_same_bytes(sim, tap, proxy, rows[-1])
    assert all(r["stream"] is True for r in rows)
    first, second = rows
    assert first["usage"]["cache_write"] > 1000 and first["usage"]["cache_read"] == 0
    assert second["usage"]["cache_read"] == finals[1].usage.cache_read_input_tokens > 1000
    assert second["usage"]["output"] == finals[1].usage.output_tokens


def test_openai_chat_stream_with_usage_and_parallel_tools(proxy, sim, tap):
    sim.state().set_script(
        [
            {
                "tool_calls": [
                    {"name": "read", "arguments": {"path": "a.py"}},
                    {"name": "read", "arguments": {"path": "b.py"}},
                ]
            }
        ]
    )
    client = _openai(proxy, tap)
    stream = client.chat.completions.create(
        model="gpt-sim",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "read both"}],
        tools=[{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    names = [
        tc.function.name for c in chunks for ch in c.choices for tc in (ch.delta.tool_calls or []) if tc.function.name
    ]
    assert names == ["read", "read"]
    [row] = proxy.wait_for_calls(1)
    _assert_same_bytes(sim, tap, proxy, row)
    assert row["api"] == "openai.chat" and row["stream"] is True
    assert row["usage"]["input"] == usage.prompt_tokens and row["usage"]["output"] == usage.completion_tokens


def test_openai_chat_stream_without_include_usage_is_not_reported(proxy, sim, tap):
    list(
        _openai(proxy, tap).chat.completions.create(
            model="gpt-sim", stream=True, messages=[{"role": "user", "content": "hi"}]
        )
    )
    [row] = proxy.wait_for_calls(1)
    assert row["usage"] is None


async def test_openai_responses_async_stream(proxy, sim, atap):
    sim.state().set_script([{"text": "streamed answer"}])
    client = openai.AsyncOpenAI(
        api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0, http_client=httpx2.AsyncClient(transport=atap)
    )
    async with client.responses.stream(model="gpt-sim", input="say something") as stream:
        final = await stream.get_final_response()
    assert final.output_text == "streamed answer"
    [row] = proxy.wait_for_calls(1)
    _assert_same_bytes(sim, atap, proxy, row)
    assert row["api"] == "openai.responses"
    assert row["usage"]["input"] == final.usage.input_tokens
    assert row["usage"]["output"] == final.usage.output_tokens


async def test_anthropic_async_non_stream_and_error_shape(proxy, sim, atap):
    sim.state().set_script([{"error": {"status": 429, "message": "slow down"}}, {"text": "ok now"}])
    client = anthropic.AsyncAnthropic(
        api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0, http_client=httpx2.AsyncClient(transport=atap)
    )
    with pytest.raises(anthropic.RateLimitError):
        await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    msg = await client.messages.create(
        model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    assert msg.content[0].text == "ok now"
    rows = proxy.wait_for_calls(2)
    assert [r["outcome"] for r in rows] == ["http_error", "ok"]
    assert rows[0]["status"] == 429
    # the same request repeated after a failure is attempt 2 of the same call
    assert rows[1]["attempt"] == 2 and rows[1]["retry_of"] == rows[0]["id"]


def test_api_key_never_reaches_the_database(proxy, sim, tap):
    handed_over: list = []  # what goes to the writer child, which writes it to its spool file as it is
    put = proxy.daemon.writer._queue.put
    proxy.daemon.writer._queue.put = lambda item: (handed_over.append(item), put(item))
    _anthropic(proxy, tap).messages.create(
        model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    _openai(proxy, tap).chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "x"}])
    rows = proxy.wait_for_calls(2)
    call = get_call(open_db(proxy.db_path), rows[0]["id"])
    assert call is not None
    proxy.stop()
    blob = b"".join(p.read_bytes() for p in proxy.db_path.parent.glob("captures.db*"))
    assert KEY.encode() not in blob and b"SECRET-0123" not in blob
    batches = [item.batch for item in handed_over if isinstance(item, Handover)]  # not the stop message
    spooled = __import__("pickle").dumps(batches)
    assert sum(len(batch) for batch in batches) == 2
    assert KEY.encode() not in spooled and b"SECRET-0123" not in spooled
    # same key, but two clients (user agents): two sessions, both named after the key's fingerprint
    assert rows[0]["session"] != rows[1]["session"]
    assert rows[0]["session"].rsplit(":", 1)[0] == rows[1]["session"].rsplit(":", 1)[0]
