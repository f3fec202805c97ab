import pytest

from ctxscope.proxy.wire.apis import (
    ALL_APIS,
    ANTHROPIC_COUNT_TOKENS,
    ANTHROPIC_MESSAGES,
    GEMINI_GENERATE,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    detect_api,
)


def test_constant_values_are_stable():
    assert ANTHROPIC_MESSAGES == "anthropic.messages"
    assert ANTHROPIC_COUNT_TOKENS == "anthropic.count_tokens"
    assert OPENAI_CHAT == "openai.chat"
    assert OPENAI_RESPONSES == "openai.responses"
    assert GEMINI_GENERATE == "gemini.generate"
    assert len(set(ALL_APIS)) == 5


@pytest.mark.parametrize(
    "path, api",
    [
        ("/v1/messages", ANTHROPIC_MESSAGES),
        ("/messages", ANTHROPIC_MESSAGES),
        ("/v1/messages/", ANTHROPIC_MESSAGES),
        ("/v1/messages?beta=true", ANTHROPIC_MESSAGES),
        ("/api/anthropic/v1/messages", ANTHROPIC_MESSAGES),
        ("/v1/messages/count_tokens", ANTHROPIC_COUNT_TOKENS),
        ("/messages/count_tokens", ANTHROPIC_COUNT_TOKENS),
        ("/v1/chat/completions", OPENAI_CHAT),
        ("/chat/completions", OPENAI_CHAT),
        ("/api/v1/chat/completions", OPENAI_CHAT),
        ("/openai/deployments/gpt-4o/chat/completions", OPENAI_CHAT),
        ("/v1/chat/completions?api-version=2024-10-21", OPENAI_CHAT),
        ("/v1/responses", OPENAI_RESPONSES),
        ("/responses", OPENAI_RESPONSES),
        ("/backend-api/codex/responses", OPENAI_RESPONSES),
        ("/v1beta/models/gemini-2.5-flash:generateContent", GEMINI_GENERATE),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", GEMINI_GENERATE),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", GEMINI_GENERATE),
        ("/v1/projects/p/locations/us/publishers/google/models/gemini-2.5-pro:generateContent", GEMINI_GENERATE),
        ("/v1internal:streamGenerateContent", GEMINI_GENERATE),
    ],
)
def test_llm_endpoints_are_recognised(path, api):
    assert detect_api("POST", path) == api
    assert detect_api("post", path) == api


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/resp_123",
        "/v1/responses/resp_123/input_items",
        "/v1/responses/resp_123/cancel",
        "/v1/responses/input_tokens",
        "/v1/chat/completions/chatcmpl-1",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/models",
        "/v1/messages/batches",
        "/v1/messages/batches/msgbatch_1/cancel",
        "/v1/threads/thread_1/messages",
        "/v1beta/models/gemini-2.5-flash:countTokens",
        "/v1beta/models/gemini-2.5-flash:embedContent",
        "/v1beta/models/gemini-2.5-flash",
        "/",
        "",
        "/completions",
    ],
)
def test_other_posts_are_not_llm_calls(path):
    assert detect_api("POST", path) is None


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"])
def test_only_post_is_an_llm_call(method):
    for path in ("/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1beta/models/m:generateContent"):
        assert detect_api(method, path) is None
