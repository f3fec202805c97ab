"""Gemini generateContent prompts: segments, pointers into the real body, o200k counts, incremental reuse."""

from __future__ import annotations

import json

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.incremental import count, prepare
from ctxscope.inspector.analyses.relation import CallContext, classify
from ctxscope.vocab.apis import Api
from ctxscope.vocab.kinds import RelationKind
from ctxscope.vocab.tokens import count_tokens

G = Api.GEMINI_GENERATE
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "read",
                "description": "Read a file.",
                "parameters": {"type": "OBJECT", "properties": {"path": {"type": "STRING"}}},
            }
        ]
    }
]
CONTENTS = [
    {
        "role": "user",
        "parts": [{"text": "Read a.txt"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}],
    },
    {
        "role": "model",
        "parts": [
            {"text": "thinking...", "thought": True},
            {"functionCall": {"name": "read", "args": {"path": "a.txt"}}},
        ],
    },
    {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {"content": "hello"}}}]},
    {"role": "model", "parts": [{"text": "It says hello."}]},
]


def body(n: int, **extra) -> dict:
    return {
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "tools": TOOLS,
        "contents": CONTENTS[:n],
        "generationConfig": {"temperature": 0},
        **extra,
    }


def resolve(doc, pointer: str):
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


def test_segments_kinds_and_pointers_into_the_body():
    b = body(4)
    prompt = canonicalize(G, b)
    assert prompt is not None and prompt.api == G
    got = [(s.pointer, s.kind, s.role) for s in prompt.segments]
    assert got == [
        ("/tools/0", "tools", None),
        ("/systemInstruction/parts/0", "system", "system"),
        ("/contents/0/parts/0", "user_text", "user"),
        ("/contents/0/parts/1", "image", "user"),
        ("/contents/1/parts/0", "thinking", "assistant"),
        ("/contents/1/parts/1", "tool_call", "assistant"),
        ("/contents/2/parts/0", "tool_result", "tool"),
        ("/contents/3/parts/0", "assistant_text", "assistant"),
    ]
    for seg in prompt.segments:
        resolve(b, seg.pointer)  # every pointer names a real place in the body as sent
    call, result = prompt.segments[5], prompt.segments[6]
    assert call.name == result.name == "read"
    assert prompt.segments[3].images == 1
    assert prompt.params == {"generationConfig": {"temperature": 0}}
    assert prompt.segments[1].text == "You are terse." and prompt.segments[7].text == "It says hello."


def test_snake_case_system_and_a_string_system_instruction():
    snake = {"system_instruction": {"parts": [{"text": "S"}]}, "contents": [{"parts": [{"text": "hi"}]}]}
    prompt = canonicalize(G, snake)
    assert [(s.pointer, s.kind) for s in prompt.segments] == [
        ("/system_instruction/parts/0", "system"),
        ("/contents/0/parts/0", "user_text"),
    ]
    assert canonicalize(G, {"contents": "not a list"}) is None
    assert canonicalize(G, {"contents": [{"parts": [{"text": "x"}]}], "systemInstruction": 5}) is None


def test_o200k_accounting_counts_each_part():
    prompt = canonicalize(G, body(4))
    tokens = TokenCounter().count_prompt(prompt)
    assert tokens.by_category["system"] == count_tokens("You are terse.")
    assert tokens.by_category["user_text"] == count_tokens("Read a.txt")
    assert tokens.by_category["assistant_text"] == count_tokens("It says hello.")
    assert tokens.total == sum(tokens.per_segment)


def test_relations_append_and_diverge():
    def ctx(b):
        return CallContext(canonicalize(G, b), "gemini", G, 0, b)

    assert classify(ctx(body(2)), ctx(body(4))).kind == RelationKind.APPEND_ONLY
    edited = body(4)
    edited["contents"] = [CONTENTS[0], {"role": "model", "parts": [{"text": "other"}]}, *CONTENTS[2:]]
    rel = classify(ctx(body(4)), ctx(edited))
    assert rel.kind == RelationKind.DIVERGED and rel.pointer == "/contents/1/parts/0/text"


def test_incremental_reuse_equals_a_full_pass():
    counter, prev, prev_tokens, reused = TokenCounter(), None, None, []
    for n in range(1, 5):
        raw = json.dumps(body(n)).encode()
        got, base = prepare(G, json.loads(raw), raw, [prev] if prev else [])
        want = canonicalize(G, json.loads(raw))
        assert got.prompt == want and got.prompt.hashes == want.hashes
        tokens = count(counter, got, base, prev_tokens if base is not None else None)
        assert tokens == TokenCounter().count_prompt(want)
        reused.append(got.reused_items)
        prev, prev_tokens = got, tokens
    assert reused == [0, 1, 2, 3]
