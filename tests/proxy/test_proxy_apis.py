import pytest

from ctxscope.proxy.wire.apis import detect_api
from ctxscope.vocab.apis import Api


def test_constant_values_are_stable():
    assert Api.ANTHROPIC_MESSAGES == "anthropic.messages"
    assert Api.ANTHROPIC_COUNT_TOKENS == "anthropic.count_tokens"
    assert Api.OPENAI_CHAT == "openai.chat"
    assert Api.OPENAI_RESPONSES == "openai.responses"
    assert Api.GEMINI_GENERATE == "gemini.generate"
    assert len(set(Api)) == 5


@pytest.mark.parametrize(
    "path, api",
    [
        ("/v1/messages", Api.ANTHROPIC_MESSAGES),
        ("/messages", Api.ANTHROPIC_MESSAGES),
        ("/v1/messages/", Api.ANTHROPIC_MESSAGES),
        ("/v1/messages?beta=true", Api.ANTHROPIC_MESSAGES),
        ("/api/anthropic/v1/messages", Api.ANTHROPIC_MESSAGES),
        ("/v1/messages/count_tokens", Api.ANTHROPIC_COUNT_TOKENS),
        ("/messages/count_tokens", Api.ANTHROPIC_COUNT_TOKENS),
        ("/v1/chat/completions", Api.OPENAI_CHAT),
        ("/chat/completions", Api.OPENAI_CHAT),
        ("/api/v1/chat/completions", Api.OPENAI_CHAT),
        ("/openai/deployments/gpt-4o/chat/completions", Api.OPENAI_CHAT),
        ("/v1/chat/completions?api-version=2024-10-21", Api.OPENAI_CHAT),
        ("/v1/responses", Api.OPENAI_RESPONSES),
        ("/responses", Api.OPENAI_RESPONSES),
        ("/backend-api/codex/responses", Api.OPENAI_RESPONSES),
        ("/v1beta/models/gemini-2.5-flash:generateContent", Api.GEMINI_GENERATE),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", Api.GEMINI_GENERATE),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", Api.GEMINI_GENERATE),
        ("/v1/projects/p/locations/us/publishers/google/models/gemini-2.5-pro:generateContent", Api.GEMINI_GENERATE),
        ("/v1internal:streamGenerateContent", Api.GEMINI_GENERATE),
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
