"""The simulator's prompt-cache model (pure core, fake clock) and prompt linearisation."""

from __future__ import annotations

import pytest

from ctxscope.simulator.model.cache import PromptCache, min_cacheable
from ctxscope.simulator.model.prompt import Block, PromptError, anthropic_prompt, chat_prompt, responses_prompt
from ctxscope.vocab.tokens import count_tokens


def words(n: int, word: str = "hello") -> str:
    text = " ".join([word] * n)
    assert count_tokens(text) == n
    return text


def block(n: int, word: str = "hello", ttl: str | None = None, meta: str = "msg:user|text") -> Block:
    return Block(meta, words(n, word), ttl)


# ---------------------------------------------------------------- Anthropic


def test_breakpoint_writes_then_reads_with_additive_usage():
    cache = PromptCache()
    blocks = [block(1500, ttl="5m"), block(300, "world")]
    first = cache.anthropic("k", "claude-sim", blocks, now=0)
    assert (first.cache_read, first.cache_write_5m, first.cache_write_1h, first.uncached) == (0, 1500, 0, 300)
    second = cache.anthropic("k", "claude-sim", blocks, now=10)
    assert (second.cache_read, second.cache_write, second.uncached) == (1500, 0, 300)
    assert second.uncached + second.cache_read + second.cache_write == second.total == 1800


def test_below_model_minimum_is_silently_uncached():
    cache = PromptCache()
    blocks = [block(1500, ttl="5m")]
    for now in (0, 1):
        usage = cache.anthropic("k", "claude-sonnet-4-6", blocks, now=now)  # minimum 2048
        assert (usage.cache_read, usage.cache_write, usage.uncached) == (0, 0, 1500)
    assert cache.anthropic("k", "claude-opus-5", [block(600, ttl="5m")], now=2).cache_write == 600


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-opus-4-6", 4096),
        ("claude-opus-4-5", 4096),
        ("claude-sonnet-4-6", 2048),
        ("claude-opus-5", 512),
        ("claude-3-5-haiku-20241022", 2048),
        ("claude-sonnet-4-20250514", 1024),
        ("claude-sim", 1024),
    ],
)
def test_minimum_table(model, minimum):
    assert min_cacheable(model) == minimum


def test_ttl_expiry_and_refresh_on_read():
    cache = PromptCache()
    blocks = [block(1200, ttl="5m"), block(10, "x")]
    cache.anthropic("k", "claude-sim", blocks, now=0)
    assert cache.anthropic("k", "claude-sim", blocks, now=200).cache_read == 1200  # refreshed: lives to 500
    assert cache.anthropic("k", "claude-sim", blocks, now=450).cache_read == 1200
    expired = cache.anthropic("k", "claude-sim", blocks, now=450 + 301)
    assert (expired.cache_read, expired.cache_write_5m) == (0, 1200)


def test_one_hour_ttl_outlives_five_minutes_and_is_reported_apart():
    cache = PromptCache()
    blocks = [block(1100, ttl="1h", meta="system|text"), block(200, "world", ttl="5m"), block(5, "x")]
    first = cache.anthropic("k", "claude-sim", blocks, now=0)
    assert (first.cache_write_1h, first.cache_write_5m, first.uncached) == (1100, 200, 5)
    later = cache.anthropic("k", "claude-sim", blocks, now=1000)  # 5m entry gone, 1h alive
    assert (later.cache_read, later.cache_write_5m, later.cache_write_1h) == (1100, 200, 0)
    assert cache.anthropic("k", "claude-sim", blocks, now=1000 + 3601).cache_read == 0


def test_moving_breakpoint_reads_within_twenty_blocks_only():
    cache = PromptCache()
    head = [block(1100, meta="system|text")]
    turns = [block(2, meta=f"msg:user{i}|text") for i in range(40)]

    def with_marker(n: int) -> list[Block]:
        msgs = [Block(b.meta, b.text, "5m" if i == n - 1 else None) for i, b in enumerate(turns[:n])]
        return head + msgs

    cache.anthropic("k", "claude-sim", with_marker(5), now=0)
    near = cache.anthropic("k", "claude-sim", with_marker(15), now=1)  # 10 blocks later: found
    assert near.cache_read == 1100 + 5 * 2 and near.cache_write == 10 * 2
    far = cache.anthropic("k", "claude-sim", with_marker(40), now=2)  # 25 blocks later: beyond lookback
    assert far.cache_read == 0 and far.cache_write == 1100 + 40 * 2


def test_changed_early_block_misses_but_earlier_breakpoint_still_reads():
    cache = PromptCache()
    tools = block(1100, "tool", ttl="5m", meta="tool")
    cache.anthropic("k", "claude-sim", [tools, block(500, ttl="5m")], now=0)
    changed = cache.anthropic("k", "claude-sim", [tools, block(500, "other", ttl="5m")], now=1)
    assert (changed.cache_read, changed.cache_write, changed.uncached) == (1100, 500, 0)


def test_cache_is_scoped_by_key_and_model():
    cache = PromptCache()
    blocks = [block(1100, ttl="5m")]
    cache.anthropic("k1", "claude-sim", blocks, now=0)
    assert cache.anthropic("k2", "claude-sim", blocks, now=1).cache_read == 0
    assert cache.anthropic("k1", "claude-other", blocks, now=1).cache_read == 0
    assert cache.anthropic("k1", "claude-sim", blocks, now=1).cache_read == 1100


# ---------------------------------------------------------------- OpenAI


def test_openai_short_prompts_never_cache():
    cache = PromptCache()
    blocks = [block(1000)]
    assert cache.openai("k", "gpt-x", blocks, now=0).cache_read == 0
    assert cache.openai("k", "gpt-x", blocks, now=1).cache_read == 0


def test_openai_caches_in_128_token_increments_inclusive():
    cache = PromptCache()
    blocks = [block(700, meta="tool"), block(700), block(77, "world")]
    first = cache.openai("k", "gpt-x", blocks, now=0)
    assert (first.total, first.cache_read, first.uncached) == (1477, 0, 1477)
    second = cache.openai("k", "gpt-x", blocks, now=1)
    assert second.cache_read == 1024 + 3 * 128 == 1408
    assert second.total == 1477  # inclusive: cached tokens are part of the prompt count


def test_openai_caches_per_prompt_cache_key_and_lives_5_minutes_unless_asked():
    """Routing by prompt_cache_key: another key is another machine; the in-memory entry lives 5 minutes
    of inactivity, prompt_cache_options.ttl or prompt_cache_retention longer."""
    blocks = [block(2000)]
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": words(2000)}]}
    cache = PromptCache()
    cache.openai("k", "gpt-x", blocks, 0, chat_prompt({**body, "prompt_cache_key": "a"}).openai)
    assert cache.openai("k", "gpt-x", blocks, 10, chat_prompt({**body, "prompt_cache_key": "b"}).openai).cache_read == 0
    assert (
        cache.openai("k", "gpt-x", blocks, 20, chat_prompt({**body, "prompt_cache_key": "a"}).openai).cache_read == 1920
    )
    assert cache.openai("k", "gpt-x", blocks, 20 + 301, chat_prompt(body).openai).cache_read == 0  # 5 min gone
    for options, gap in (({"prompt_cache_options": {"ttl": "30m"}}, 1700), ({"prompt_cache_retention": "24h"}, 80_000)):
        cache = PromptCache()
        policy = chat_prompt({**body, **options}).openai
        cache.openai("k", "gpt-x", blocks, 0, policy)
        assert cache.openai("k", "gpt-x", blocks, gap, policy).cache_read == 1920, options


def test_openai_explicit_breakpoints_are_exact_and_mode_explicit_drops_the_automatic_ones():
    item = {"type": "input_text", "text": words(1100), "prompt_cache_breakpoint": {"mode": "explicit"}}
    body = {
        "model": "gpt-x",
        "input": [{"role": "user", "content": [item, {"type": "input_text", "text": words(600, "world")}]}],
    }
    prompt, _ = responses_prompt(body)
    cache = PromptCache()
    cache.openai("k", "gpt-x", prompt.blocks, 0, prompt.openai)
    assert cache.openai("k", "gpt-x", prompt.blocks, 1, prompt.openai).cache_read == 1664  # 1024 + 5 * 128
    explicit, _ = responses_prompt({**body, "prompt_cache_options": {"mode": "explicit"}})
    cache = PromptCache()
    cache.openai("k", "gpt-x", explicit.blocks, 0, explicit.openai)
    assert cache.openai("k", "gpt-x", explicit.blocks, 1, explicit.openai).cache_read == 1100  # the breakpoint's end
    other = {"role": "user", "content": [item, {"type": "input_text", "text": words(600, "other")}]}
    changed, _ = responses_prompt({**body, "prompt_cache_options": {"mode": "explicit"}, "input": [other]})
    assert cache.openai("k", "gpt-x", changed.blocks, 2, changed.openai).cache_read == 1100  # shared up to it


def test_openai_partial_block_prefix_counts_at_token_level():
    cache = PromptCache()
    cache.openai("k", "gpt-x", [block(2000)], now=0)
    diverged = cache.openai("k", "gpt-x", [Block("msg:user|text", words(1300) + " " + words(700, "world"))], now=1)
    assert diverged.cache_read == 1280  # largest boundary within the 1300 shared tokens
    other_role = cache.openai("k", "gpt-x", [Block("msg:system|text", words(2000))], now=2)
    assert other_role.cache_read == 0


def test_openai_entries_expire():
    cache = PromptCache()
    blocks = [block(1100)]
    cache.openai("k", "gpt-x", blocks, now=0)
    assert cache.openai("k", "gpt-x", blocks, now=601).cache_read == 0


# ---------------------------------------------------------------- linearisation


def test_anthropic_prompt_order_ttl_and_marker_free_keys():
    body = {
        "tools": [{"name": "read", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file body"}]},
        ],
    }
    prompt = anthropic_prompt(body)
    assert [b.meta.split("|")[0] for b in prompt.blocks] == ["tool", "system", "msg:user", "msg:assistant", "msg:user"]
    assert [b.ttl for b in prompt.blocks] == ["5m", "1h", None, None, None]
    assert prompt.last_text == "file body" and prompt.last_user_text == "hello"
    unmarked = anthropic_prompt({**body, "tools": [{"name": "read", "input_schema": {"type": "object"}}]})
    assert unmarked.blocks[0].key == prompt.blocks[0].key


def test_anthropic_top_level_cache_control_marks_last_block_and_limit_is_four():
    prompt = anthropic_prompt(
        {"cache_control": {"type": "ephemeral", "ttl": "1h"}, "messages": [{"role": "user", "content": "a"}]}
    )
    assert prompt.blocks[-1].ttl == "1h"
    marked = [{"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(PromptError, match="Found 5"):
        anthropic_prompt({"messages": [{"role": "user", "content": marked}]})


def test_chat_prompt_blocks_and_texts():
    prompt = chat_prompt(
        {
            "tools": [{"type": "function", "function": {"name": "read"}}],
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "question"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "result text"},
            ],
        }
    )
    assert [b.meta.split("|")[0] for b in prompt.blocks] == ["tool", "msg:system", "msg:user", "tool_call", "msg:tool"]
    assert prompt.last_text == "result text" and prompt.last_user_text == "question"


def test_responses_prompt_prepends_previous_conversation():
    previous = (Block("msg:user|text", "earlier"),)
    prompt, conversation = responses_prompt({"instructions": "be kind", "input": "now"}, previous)
    assert [b.text for b in prompt.blocks] == ["be kind", "earlier", "now"]
    assert [b.text for b in conversation] == ["earlier", "now"]
    assert prompt.last_user_text == "now"
