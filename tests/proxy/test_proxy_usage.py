import pytest

from ctxscope.proxy.wire.usage import Usage, normalize_usage
from ctxscope.vocab.apis import Api


def test_not_reported_is_none_not_zero():
    for api in (Api.ANTHROPIC_MESSAGES, Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.GEMINI_GENERATE, None):
        assert normalize_usage(api, None) is None


def test_anthropic_is_additive():
    raw = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 5000,
        "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 87,
        "service_tier": "standard",
    }
    u = normalize_usage(Api.ANTHROPIC_MESSAGES, raw)
    assert (u.input, u.output, u.cache_read, u.cache_write) == (5312, 87, 5000, 300)
    assert u.semantics == "additive"
    assert u.uncached == 12
    assert u.raw is raw
    assert u.to_dict() == {"input": 5312, "output": 87, "cache_read": 5000, "cache_write": 300}


def test_anthropic_without_cache_fields_reports_none_for_them():
    u = normalize_usage(Api.ANTHROPIC_MESSAGES, {"input_tokens": 40, "output_tokens": 2})
    assert (u.input, u.output, u.cache_read, u.cache_write) == (40, 2, None, None)
    assert u.uncached == 40


def test_anthropic_cache_write_from_ttl_split_only():
    raw = {"input_tokens": 1, "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20}}
    u = normalize_usage(Api.ANTHROPIC_MESSAGES, raw)
    assert (u.input, u.cache_write, u.output) == (31, 30, None)


def test_anthropic_count_tokens():
    u = normalize_usage(Api.ANTHROPIC_COUNT_TOKENS, {"input_tokens": 2095})
    assert (u.input, u.output, u.cache_read, u.cache_write) == (2095, None, None, None)


def test_openai_chat_is_inclusive_and_reasoning_stays_in_raw():
    raw = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0},
    }
    u = normalize_usage(Api.OPENAI_CHAT, raw)
    assert (u.input, u.output, u.cache_read, u.cache_write) == (2006, 300, 1920, None)
    assert u.semantics == "inclusive"
    assert u.uncached == 86
    assert u.raw["completion_tokens_details"]["reasoning_tokens"] == 256


def test_openai_cache_writes_only_when_reported():
    raw = {
        "prompt_tokens": 5000,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4096},
    }
    u = normalize_usage(Api.OPENAI_CHAT, raw)
    assert (u.cache_read, u.cache_write, u.uncached) == (0, 4096, 904)
    raw = {
        "input_tokens": 5000,
        "output_tokens": 1,
        "input_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 2048},
    }
    u = normalize_usage(Api.OPENAI_RESPONSES, raw)
    assert (u.input, u.cache_read, u.cache_write, u.uncached) == (5000, 1024, 2048, 1928)


def test_openai_chat_without_details():
    u = normalize_usage(Api.OPENAI_CHAT, {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12})
    assert (u.input, u.output, u.cache_read, u.cache_write) == (9, 3, None, None)
    u = normalize_usage(Api.OPENAI_CHAT, {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": None})
    assert u.cache_read is None


def test_openai_compatible_cache_hit_fields():
    raw = {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}
    assert normalize_usage(Api.OPENAI_CHAT, raw).cache_read == 64


def test_openai_responses():
    raw = {
        "input_tokens": 328,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 52,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 380,
    }
    u = normalize_usage(Api.OPENAI_RESPONSES, raw)
    assert (u.input, u.output, u.cache_read, u.cache_write) == (328, 52, 0, None)
    assert u.semantics == "inclusive"


def test_gemini_thoughts_count_as_output_and_cached_is_inside_prompt():
    raw = {
        "promptTokenCount": 4000,
        "cachedContentTokenCount": 3000,
        "candidatesTokenCount": 120,
        "thoughtsTokenCount": 500,
        "totalTokenCount": 4620,
    }
    u = normalize_usage(Api.GEMINI_GENERATE, raw)
    assert (u.input, u.output, u.cache_read, u.cache_write) == (4000, 620, 3000, None)
    assert u.uncached == 1000
    assert u.semantics == "inclusive"


def test_gemini_partial_metadata():
    u = normalize_usage(Api.GEMINI_GENERATE, {"promptTokenCount": 10, "totalTokenCount": 10})
    assert (u.input, u.output, u.cache_read) == (10, None, None)
    u = normalize_usage(Api.GEMINI_GENERATE, {"promptTokenCount": 10, "thoughtsTokenCount": 7})
    assert u.output == 7


def test_uncached_is_none_without_input():
    u = normalize_usage(Api.ANTHROPIC_MESSAGES, {"output_tokens": 5})
    assert u.input is None and u.uncached is None and u.output == 5


def test_non_integer_values_are_not_trusted():
    raw = {"prompt_tokens": "12", "completion_tokens": True, "prompt_tokens_details": {"cached_tokens": 3.0}}
    u = normalize_usage(Api.OPENAI_CHAT, raw)
    assert (u.input, u.output, u.cache_read) == (None, None, 3)


@pytest.mark.parametrize(
    "raw, semantics, expected_input",
    [
        ({"input_tokens": 5, "cache_read_input_tokens": 10, "output_tokens": 1}, "additive", 15),
        ({"prompt_tokens": 5, "completion_tokens": 1}, "inclusive", 5),
        ({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}}, "inclusive", 5),
        ({"promptTokenCount": 5, "candidatesTokenCount": 1}, "inclusive", 5),
        ({"input_tokens": 5, "output_tokens": 1}, "additive", 5),
    ],
)
def test_unknown_api_is_recognised_by_field_names(raw, semantics, expected_input):
    u = normalize_usage(None, raw)
    assert u.semantics == semantics and u.input == expected_input
    assert normalize_usage("u/some-server", raw).input == expected_input


def test_unrecognisable_or_non_dict_usage():
    assert normalize_usage(None, {"tokens": 5}) is None
    assert normalize_usage(Api.OPENAI_CHAT, [1, 2]) is None


def test_usage_is_frozen():
    u = normalize_usage(Api.OPENAI_CHAT, {"prompt_tokens": 1})
    assert isinstance(u, Usage)
    with pytest.raises(AttributeError):
        u.input = 2
