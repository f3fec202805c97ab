import itertools

import pytest

from ctxscope.inspector.analyses.accounting import (
    CATEGORIES,
    IMAGE_TOKENS,
    LONG_TEXT,
    SHORT_ENTRIES,
    TokenBreakdown,
    TokenCounter,
)
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.vocab.tokens import count_tokens

from support.inspector_bodies import (
    assistant,
    claude_code_turns,
    make_anthropic_body,
    make_chat_body,
    make_tool,
    reminder,
    text,
    tool_result,
    tool_use,
    user,
)

A = "anthropic.messages"
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


def test_per_segment_counts_are_exact_and_categorised():
    body = make_anthropic_body(
        system="You are terse.",
        tools=[make_tool("bash", "Run a command.", command="The command.")],
        messages=[
            user("List the files."),
            assistant([text("Running ls."), tool_use("t1", "bash", command="ls")]),
            user([tool_result("t1", "a.py\nb.py")]),
        ],
    )
    p = canonicalize(A, body)
    b = TokenCounter().count_prompt(p)
    assert tuple(b.per_segment) == tuple(count_tokens(s.text) for s in p.segments)
    assert b.total == sum(b.per_segment)
    assert set(b.by_category) == set(CATEGORIES)
    assert b.by_category["system"] == count_tokens("You are terse.")
    assert b.by_category["tools"] == count_tokens(p.segments[0].text)
    assert b.by_category["user_text"] == count_tokens("List the files.")
    assert b.by_category["assistant_text"] == count_tokens("Running ls.")
    assert b.by_category["tool_call"] == count_tokens(p.segments[4].text)
    assert b.by_category["tool_result"] == count_tokens("a.py\nb.py")
    assert sum(b.by_category.values()) == b.total


def test_reminders_are_split_out_of_user_text_and_tool_results():
    r1, r2 = reminder("The todo list is empty."), reminder("Do not edit generated files.")
    body = make_anthropic_body(
        messages=[
            user([text(r1), text("Please fix the failing test. " + r2)]),
            assistant([tool_use("t", "read_file", path="x")]),
            user([tool_result("t", "line 1\n" + r2)]),
        ]
    )
    p = canonicalize(A, body)
    b = TokenCounter().count_prompt(p)
    whole_user, whole_result = count_tokens(p.segments[1].text), count_tokens(p.segments[3].text)
    assert b.by_category["reminder"] == count_tokens(r1) + 2 * count_tokens(r2)
    assert b.by_category["user_text"] == whole_user - count_tokens(r2)
    assert b.by_category["tool_result"] == whole_result - count_tokens(r2)
    # Segment totals stay the exact count of the whole text.
    assert b.per_segment[1] == whole_user and b.per_segment[3] == whole_result
    assert sum(b.by_category.values()) == b.total


def test_assistant_text_mentioning_reminders_is_not_split():
    p = canonicalize(A, make_anthropic_body(messages=[user("q"), assistant("I saw " + reminder("x"))]))
    b = TokenCounter().count_prompt(p)
    assert b.by_category["reminder"] == 0 and b.by_category["assistant_text"] == b.per_segment[1]


def test_images_are_a_fixed_estimate():
    shot = tool_result("t", [text("shot"), dict(IMAGE), dict(IMAGE)])
    body = make_anthropic_body(messages=[user([dict(IMAGE), text("what?")]), assistant("A cat."), user([shot])])
    b = TokenCounter().count_prompt(canonicalize(A, body))
    assert b.per_segment[0] == IMAGE_TOKENS
    assert b.by_category["image"] == 3 * IMAGE_TOKENS
    assert b.per_segment[3] == count_tokens("shot") + 2 * IMAGE_TOKENS
    assert b.by_category["tool_result"] == count_tokens("shot")
    small = TokenCounter(image_tokens=10).count_prompt(canonicalize(A, body))
    assert small.by_category["image"] == 30


def test_thinking_and_other_categories():
    body = make_anthropic_body(
        messages=[
            user("q"),
            assistant(
                [{"type": "thinking", "thinking": "Hmm, let me see.", "signature": "s"}, {"type": "mystery", "x": 1}]
            ),
        ]
    )
    b = TokenCounter().count_prompt(canonicalize(A, body))
    assert b.by_category["thinking"] == count_tokens("Hmm, let me see.")
    assert b.by_category["other"] == count_tokens('{"type":"mystery","x":1}')


def test_a_call_only_pays_for_its_new_segments():
    counter = TokenCounter()
    bodies = claude_code_turns(5)
    prompts = [canonicalize(A, b) for b in bodies]
    counter.count_prompt(prompts[0])
    first_misses = counter.misses
    assert first_misses == len(prompts[0].segments)
    for prev, cur in itertools.pairwise(prompts):
        before = counter.misses
        counter.count_prompt(cur)
        assert counter.misses - before == len(cur.segments) - len(prev.segments)  # only the new tail
    assert counter.hits > 0


def test_cache_is_bounded_lru():
    counter = TokenCounter(max_entries=3)
    prompt = canonicalize(
        A, make_anthropic_body(messages=[user(f"message {i} " + "word " * (LONG_TEXT // 5)) for i in range(5)])
    )
    counter.count_prompt(prompt)
    assert len(counter._cache) == 3
    misses = counter.misses
    counter.count_segment(prompt.segments[4])  # recent: still cached
    assert counter.misses == misses
    counter.count_segment(prompt.segments[0])  # evicted: counted again
    assert counter.misses == misses + 1


def test_short_texts_have_their_own_small_lru():
    counter = TokenCounter(max_entries=3)
    prompt = canonicalize(A, make_anthropic_body(messages=[user(f"message {i}") for i in range(SHORT_ENTRIES + 1)]))
    counter.count_prompt(prompt)
    assert len(counter._cache) == 0 and len(counter._short) == SHORT_ENTRIES  # they do not crowd out long texts
    misses = counter.misses
    counter.count_segment(prompt.segments[-1])  # recent: still remembered
    assert counter.misses == misses
    counter.count_segment(prompt.segments[0])  # evicted: counted again
    assert counter.misses == misses + 1


def test_cumulative_and_prefix_tokens():
    b = TokenCounter().count_prompt(
        canonicalize(
            "openai.chat",
            make_chat_body(messages=[{"role": "system", "content": "one two"}, {"role": "user", "content": "three"}]),
        )
    )
    assert tuple(b.cumulative) == (b.per_segment[0], b.total)
    assert b.prefix_tokens(0) == 0 and b.prefix_tokens(1) == b.per_segment[0] and b.prefix_tokens(2) == b.total
    assert b.prefix_tokens(9) == b.total and b.prefix_tokens(-1) == b.per_segment[0]  # as slicing counts
    given = TokenBreakdown(b.total, b.by_category, b.per_segment, cumulative=b.cumulative)
    assert given == b and given.cumulative is b.cumulative
    # any sequence goes in; int arrays come out, so the next call copies them with one memcpy
    plain = TokenBreakdown(b.total, b.by_category, tuple(b.per_segment))
    assert plain == b and plain.per_segment.typecode == plain.cumulative.typecode == "q"
    with pytest.raises(ValueError):
        TokenBreakdown(b.total, b.by_category, b.per_segment, cumulative=(1,))


def test_empty_prompt():
    p = canonicalize("openai.responses", {"model": "gpt-5", "previous_response_id": "r"})
    b = TokenCounter().count_prompt(p)
    assert (b.total, tuple(b.per_segment), tuple(b.cumulative)) == (0, (), ())
