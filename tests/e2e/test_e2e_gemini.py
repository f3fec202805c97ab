"""The official google-genai SDK through the daemon's /gemini route to the simulator.

Two turns of one conversation: the second is APPEND_ONLY, its o200k count equals the prompt
tokens the simulator reported, and its cache read (cachedContentTokenCount) becomes a hit.
"""

from __future__ import annotations

import json

import pytest
from google import genai
from google.genai import types

from ctxscope.vocab.tokens import count_tokens

from support.inspector_bodies import long_text

KEY = "AIza-test-gemini-0123456789abcdef"
MODEL = "gemini-2.5-flash"
SYSTEM = long_text(1000, "gemini")  # well over the 1024-token caching minimum


@pytest.fixture
def client(proxy):
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=proxy.url + "/gemini"))
    yield c
    c.close()


@pytest.fixture(autouse=True)
def _analysis_never_fails(proxy):
    yield
    stats_now = proxy.daemon.writer.stats()
    assert stats_now.analysis_failed == 0 and stats_now.failed == 0, stats_now.last_error


def _turns(client, stream: bool):
    config = types.GenerateContentConfig(system_instruction=SYSTEM)
    first = [types.Content(role="user", parts=[types.Part(text="What is a prefix cache?")])]
    if stream:
        answer = "".join(
            c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents=first, config=config)
        )
    else:
        answer = client.models.generate_content(model=MODEL, contents=first, config=config).text
    second = [
        *first,
        types.Content(role="model", parts=[types.Part(text=answer)]),
        types.Content(role="user", parts=[types.Part(text="And why does order matter?")]),
    ]
    if stream:
        usage = None
        for chunk in client.models.generate_content_stream(model=MODEL, contents=second, config=config):
            usage = chunk.usage_metadata or usage
        return answer, usage
    return answer, client.models.generate_content(model=MODEL, contents=second, config=config).usage_metadata


@pytest.mark.parametrize("stream", [False, True], ids=["generateContent", "streamGenerateContent-sse"])
def test_genai_two_turns_append_only_with_right_tokens(proxy, sim, client, stream):
    answer, usage = _turns(client, stream)
    rows = proxy.wait_for_calls(2)
    first, second = rows
    assert [r["api"] for r in rows] == ["gemini.generate"] * 2
    assert [r["model"] for r in rows] == [MODEL] * 2
    assert [r["provider"] for r in rows] == ["gemini"] * 2
    assert [r["outcome"] for r in rows] == ["ok"] * 2 and second["stream"] is stream
    assert (first["relation"], second["relation"]) == ("EPOCH_START", "APPEND_ONLY")
    assert second["predecessor"] == first["id"]
    # o200k accounting: the prompt's parts, counted as the (independent) simulator counts them.
    expected = sum(count_tokens(t) for t in (SYSTEM, "What is a prefix cache?", answer, "And why does order matter?"))
    assert second["tokens_estimated"] == expected == usage.prompt_token_count
    assert second["tokens_by_category"]["system"] == count_tokens(SYSTEM)
    # The second turn reads the cached prefix; the verdict comes from cachedContentTokenCount.
    assert usage.cached_content_token_count and usage.cached_content_token_count >= 1024
    assert second["usage"]["cache_read"] == usage.cached_content_token_count
    assert second["cache"]["verdict"] == "hit"


def test_json_array_stream_is_reassembled(proxy, sim):
    """streamGenerateContent without alt=sse answers one JSON array of frames; the capture merges them."""
    import httpx2

    body = {"contents": [{"role": "user", "parts": [{"text": "tell me a few words please"}]}]}
    with httpx2.Client() as http:
        r = http.post(
            f"{proxy.url}/gemini/v1beta/models/{MODEL}:streamGenerateContent",
            json=body,
            headers={"x-goog-api-key": KEY},
        )
    frames = r.json()
    assert r.status_code == 200 and isinstance(frames, list) and len(frames) > 1
    assert bytes(sim.written[-1]) == r.content
    [row] = proxy.wait_for_calls(1)
    final = frames[-1]["usageMetadata"]
    assert row["stream"] is True and row["outcome"] == "ok"
    assert row["usage"]["input"] == final["promptTokenCount"]
    assert row["usage"]["output"] == final["candidatesTokenCount"]
    assert row["tokens_estimated"] == count_tokens("tell me a few words please") == final["promptTokenCount"]
    assert KEY not in json.dumps(row)
