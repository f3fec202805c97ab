"""Incremental canonicalisation must equal canonicalize() exactly, whatever changed between bodies."""

from __future__ import annotations

import copy
import json

import pytest

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.hashes import known_common
from ctxscope.inspector.analyses.incremental import (
    Prepared,
    count,
    item_ends,
    prepare,
    prepare_full,
    scan_items,
    shared_items,
)

from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    chat_tool,
    claude_code_turns,
    default_system,
    default_tools,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    text,
    user,
)

A, CHAT, RESP = "anthropic.messages", "openai.chat", "openai.responses"


def encode(body, **kw) -> bytes:
    return json.dumps(body, **kw).encode()


def chain(api, bodies, **dump):
    """Prepare each body against the previous one; every result must equal canonicalize()."""
    counter, prev, prev_tokens, reused = TokenCounter(), None, None, []
    for body in bodies:
        raw = encode(body, **dump)
        got, base = prepare(api, json.loads(raw), raw, [prev] if prev else [])
        want = canonicalize(api, json.loads(raw))
        assert got.prompt == want and got.prompt.hashes == want.hashes
        assert got.prompt.tool_refs == want.tool_refs
        assert got.prompt.cache_policy == want.cache_policy
        tokens = count(counter, got, base, prev_tokens if base is not None else None)
        assert tokens == TokenCounter().count_prompt(want)
        assert tokens.cumulative == TokenCounter().count_prompt(want).cumulative
        if prev is not None:  # what the hashes know they share with the base is true
            k = known_common(got.prompt.hashes, prev.prompt.hashes)
            assert got.prompt.hashes[:k] == prev.prompt.hashes[:k]
        reused.append(got.reused_items)
        prev, prev_tokens = got, tokens
    return reused


def test_agent_loop_reuses_all_but_the_restrung_last_message():
    bodies = claude_code_turns(6, reminders=(3,))
    # the message that lost its marker (and became a string) is canonicalised again, with the new ones
    assert chain(A, bodies) == [0, 0, 2, 4, 6, 8]


@pytest.mark.parametrize("dump", [{}, {"indent": 2}, {"ensure_ascii": False}, {"separators": (",", ":")}])
def test_serialisations_and_non_ascii_text(dump):
    msgs = [user("Grüße, 你好 — naïve café ☕"), assistant("Ça va? 😀"), user("weiter")]
    bodies = [make_anthropic_body(default_system(), default_tools(), msgs[: i + 1]) for i in range(3)]
    bodies.append(make_anthropic_body(default_system(), default_tools(), msgs + [assistant("ok"), user("é")]))
    assert chain(A, bodies, **dump) == [0, 1, 2, 3]


def test_edits_truncation_and_head_changes():
    base = make_anthropic_body(
        default_system(), default_tools(), [user("a"), assistant("b"), user("c"), assistant("d")]
    )
    middle = copy.deepcopy(base)
    middle["messages"][1]["content"] = "B"
    shrunk = copy.deepcopy(base)
    shrunk["messages"] = shrunk["messages"][:2]
    tools = copy.deepcopy(shrunk)
    tools["tools"][0]["description"] = "Changed."
    system = copy.deepcopy(tools)
    system["system"] = "One string now."
    marker = copy.deepcopy(system)
    marker["messages"][0] = user([text("a", cache_control=EPHEMERAL)])
    params = dict(marker, max_tokens=5, temperature=0.5)
    # head changes (tools, system, parameters) never stop the messages' reuse
    assert chain(A, [base, middle, shrunk, tools, system, marker, params]) == [0, 1, 1, 2, 2, 0, 2]


def test_openai_chat_and_responses():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "data"},
    ]
    chats = [make_chat_body(msgs[: i + 1], tools=[chat_tool("read")]) for i in range(4)]
    assert chain(CHAT, chats) == [0, 1, 2, 3]
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yo"}]},
        {"type": "function_call_output", "call_id": "x", "output": "out"},
    ]
    responses = [make_responses_body(items[: i + 1], instructions="Be brief.") for i in range(3)]
    responses.append(make_responses_body("a plain string input"))
    responses.append(make_responses_body(items, instructions="Be brief."))
    assert chain(RESP, responses) == [0, 1, 2, 0, 0]


def test_a_repeated_items_key_falls_back_to_a_full_pass():
    body = make_anthropic_body(messages=[user("a"), assistant("b"), user("c")])
    first = encode(body)
    second = first[:-1] + b', "messages": [{"role": "user", "content": "other"}]}'
    prev = prepare_full(A, json.loads(first), first)
    got, base = prepare(A, json.loads(second), second, [prev])
    assert got.prompt == canonicalize(A, json.loads(second)) and base is None


def test_item_ends_match_the_items():
    body = {"model": "m", "x": {"messages": [1]}, "messages": [{"a": "]"}, "s\\"], "tail": [1, 2]}
    raw = json.dumps(body, indent=1, ensure_ascii=False).encode()
    ends = item_ends(raw, "messages")
    start = raw.rindex(b'"messages": [') + len(b'"messages": ')
    assert len(ends) == 2 and raw[start + ends[0] - 1 : start + ends[0]] == b"}"
    assert raw[: start + ends[1]].endswith(b'"s\\\\"')
    assert item_ends(b'{"messages": [1], "messages": [2]}', "messages") is None  # json.loads keeps the last
    assert item_ends(b"[1, 2]", "messages") is None and item_ends(b'{"messages": "x"}', "messages") is None
    assert item_ends(b'{"messages": [1, 2', "messages") is None
    assert item_ends(b'{"messages": []}', "messages") == ()


def test_unparseable_bodies():
    assert prepare(A, {"messages": "nope"}, b'{"messages": "nope"}', []) == (None, None)
    got, base = prepare(A, make_anthropic_body(), None, [])  # no raw body: canonicalised, not reusable later
    assert got.prompt == canonicalize(A, make_anthropic_body()) and not got.reusable and base is None


def test_breakpoints_in_reused_messages_follow_a_changed_head():
    msgs = [user([text("a", cache_control=EPHEMERAL)]), assistant("b"), user([text("c", cache_control=EPHEMERAL)])]
    first = make_anthropic_body(default_system(), default_tools(), msgs)
    second = make_anthropic_body("One system string.", default_tools()[:1], msgs + [assistant("d"), user("e")])
    third = make_anthropic_body(default_system(), default_tools(), msgs + [assistant("d"), user("e"), assistant("f")])
    assert chain(A, [first, second, third]) == [0, 3, 5]


def test_tool_refs_follow_calls_results_and_history_edits():
    def turn(i, name="read"):
        return [
            assistant([text(f"step {i}"), {"type": "tool_use", "id": f"t{i}", "name": name, "input": {}}]),
            user([{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out {i}", "cache_control": EPHEMERAL}]),
        ]

    msgs = [user("go")]
    bodies = []
    for i in range(40):  # more calls than ToolRefs.MAX_LAYERS: the layers fold on the way
        msgs = [copy.deepcopy(m) for m in msgs]
        for m in msgs:  # the marker moves to the newest result, so the last message is restrung
            for block in m["content"] if isinstance(m["content"], list) else ():
                block.pop("cache_control", None)
        msgs += turn(i, "read" if i % 2 else "write")
        bodies.append(make_anthropic_body(default_system(), default_tools(), msgs))
    renamed = copy.deepcopy(bodies[-1])  # a call renamed in history, then the history cut short
    renamed["messages"][3]["content"][1]["name"] = "renamed"
    bodies += [renamed, make_anthropic_body(default_system(), default_tools(), renamed["messages"][:20])]
    reused = chain(A, bodies)
    assert reused[1:40] == list(range(2, 80, 2)) and reused[-1] == 20
    refs = canonicalize(A, bodies[-1]).tool_refs
    assert refs.names["t1"] == "renamed" and refs.names.get("t15") is None and "t8" in refs.results


@pytest.mark.parametrize("model", ["m", "a-longer-model"], ids=["array-at-the-same-offset", "array-moved"])
def test_shared_items_counts_byte_equal_leading_items(model):
    """At the same offset the shared items are read off the bodies' common prefix; elsewhere they
    are compared item by item: the counts are the same."""
    items = [{"n": i, "text": "x" * (i % 7)} for i in range(30)]
    raw = encode({"model": model, "messages": items})
    base = prepare_full(A, json.loads(raw), raw)
    assert isinstance(base, Prepared) and len(base.ends) == 30
    for k in range(31):
        for change in ("edit", "cut"):
            other = [dict(it) for it in items]
            if change == "edit" and k < 30:
                other[k]["text"] += "!"
            elif change == "cut":
                other = other[:k]
            body = encode({"model": "m", "messages": other})
            start = body.index(b"[")
            want = k if change == "edit" and k < 30 else min(k, 30) if change == "cut" else 30
            assert shared_items(body, start, base) == want, (k, change)


def test_the_candidate_sharing_the_most_items_is_chosen_in_a_pool_of_many():
    # A pool of many threads (each call of a client without a session id may start one): a candidate
    # is looked at fully only if it shares more than the best so far; the choice is the one a full
    # look at each makes (the first of those sharing the most).
    items = [{"n": i, "text": "y" * (i % 5)} for i in range(12)]
    pool = []
    for kept, extra in [(0, 1), (3, 2), (3, 0), (7, 3), (2, 4), (7, 1), (12, 0), (12, 5), (5, 0)]:
        body = {"model": "m", "messages": items[:kept] + [{"n": 100 + j} for j in range(extra)]}
        raw = encode(body)
        pool.append(prepare_full(A, json.loads(raw), raw))
    for size in range(13):
        raw = encode({"model": "m", "messages": items[:size] + [{"n": 999}]})
        start = raw.index(b"[")
        for k in range(len(pool) + 1):
            cands = pool[k:] + pool[:k]
            shared = [shared_items(raw, start, c) for c in cands]
            want = max(shared)
            _start, ends, m, best = scan_items(raw, "messages", cands)
            assert m == want, (size, k)
            assert best is (cands[shared.index(want)] if want else None), (size, k)
            assert list(ends) == list(item_ends(raw, "messages") or ())


def test_a_few_shared_bytes_are_canonicalised_again_not_joined_to_the_base():
    # Joining a prompt to its base costs more than canonicalising a few hundred bytes again: below
    # min_reuse shared bytes the base is not used, and the prompt is the same either way.
    system = {"role": "system", "content": "Be brief. " * 20}
    first = encode({"model": "m", "messages": [system, {"role": "user", "content": "one"}]})
    second = encode({"model": "m", "messages": [system, {"role": "user", "content": "two"}]})
    base = prepare_full(CHAT, json.loads(first), first)
    shared = len(encode(system)) + 1  # the system message and the "[" before it
    want = canonicalize(CHAT, json.loads(second))
    for min_reuse, reused in ((0, True), (shared, True), (shared + 1, False), (10_000, False)):
        got, used = prepare(CHAT, json.loads(second), second, [base], min_reuse=min_reuse)
        assert (used is base) == reused and got.reused_items == (1 if reused else 0), min_reuse
        assert got.prompt == want and got.prompt.hashes == want.hashes
        assert got.prompt.cache_policy == want.cache_policy
        counted = count(TokenCounter(), got, used, TokenCounter().count_prompt(base.prompt) if used else None)
        assert counted == TokenCounter().count_prompt(want)
