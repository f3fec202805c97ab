import copy
import pickle

import pytest

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import escape, is_reminder, split_reminders
from ctxscope.inspector.analyses.hashes import Hashes

from support.inspector_bodies import (
    EPHEMERAL,
    assert_pointers_resolve,
    assistant,
    chat_tool,
    default_system,
    default_tools,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    make_tool,
    reminder,
    text,
    tool_result,
    tool_use,
    user,
)

A = "anthropic.messages"
CHAT = "openai.chat"
RESP = "openai.responses"


def kinds(prompt):
    return [s.kind for s in prompt.segments]


def pointers(prompt):
    return [s.pointer for s in prompt.segments]


# --- Anthropic -------------------------------------------------------------------------------


def test_anthropic_order_is_tools_system_messages_with_body_pointers():
    body = make_anthropic_body(
        system=default_system(),
        tools=default_tools(),
        messages=[
            user("Fix it."),
            assistant([text("Looking."), tool_use("t1", "read_file", path="a.py")]),
            user([tool_result("t1", "print(1)")]),
        ],
    )
    # Insertion order of the body does not matter: the canonical order is the provider's.
    body = {"messages": body["messages"], "system": body["system"], "model": body["model"], "tools": body["tools"]}
    p = canonicalize(A, body)
    assert pointers(p) == [
        "/tools/0",
        "/tools/1",
        "/tools/2",
        "/system/0",
        "/system/1",
        "/messages/0/content",
        "/messages/1/content/0",
        "/messages/1/content/1",
        "/messages/2/content/0",
    ]
    assert kinds(p) == ["tools"] * 3 + ["system"] * 2 + ["user_text", "assistant_text", "tool_call", "tool_result"]
    assert [s.role for s in p.segments][3:] == ["system", "system", "user", "assistant", "assistant", "user"]
    assert p.segments[0].name == "read_file"
    assert (p.segments[7].name, p.segments[7].ref) == ("read_file", "t1")
    assert p.segments[8].ref == "t1" and p.segments[8].text == "print(1)"
    assert p.model == "claude-sonnet-4-5" and p.api == A
    assert_pointers_resolve(p, body)


def test_segment_text_is_what_gets_counted():
    body = make_anthropic_body(system="Be brief.", tools=[make_tool("bash")], messages=[user("hi")])
    p = canonicalize(A, body)
    assert p.segments[0].text.startswith("{") and '"name":"bash"' in p.segments[0].text
    assert p.segments[1].pointer == "/system" and p.segments[1].text == "Be brief."
    assert p.segments[2].text == "hi"


def test_cache_control_is_not_part_of_the_hash_but_is_reported():
    plain = make_anthropic_body(system=[text("S")], messages=[user([text("hi")])])
    marked = copy.deepcopy(plain)
    marked["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    marked["messages"][0]["content"][0]["cache_control"] = dict(EPHEMERAL)
    a, b = canonicalize(A, plain), canonicalize(A, marked)
    assert a.hashes == b.hashes
    assert b.segments[0].breakpoint == {"type": "ephemeral", "ttl": "1h"}
    assert b.cache_policy["breakpoints"] == [
        {"segment": 0, "pointer": "/system/0", "ttl": "1h"},
        {"segment": 1, "pointer": "/messages/0/content/0", "ttl": None},
    ]
    assert a.cache_policy == {"breakpoints": []}


def test_top_level_cache_control_goes_to_policy_not_params():
    p = canonicalize(A, make_anthropic_body(cache_control=dict(EPHEMERAL), temperature=0.2))
    assert p.cache_policy["cache_control"] == EPHEMERAL
    assert p.params == {"max_tokens": 4096, "temperature": 0.2}


def test_string_content_equals_a_single_text_block():
    as_string = make_anthropic_body(system="S", messages=[user("hello"), assistant("hi"), user("go")])
    as_blocks = make_anthropic_body(
        system=[text("S")],
        messages=[user([text("hello", cache_control=dict(EPHEMERAL))]), assistant([text("hi")]), user([text("go")])],
    )
    assert canonicalize(A, as_string).hashes == canonicalize(A, as_blocks).hashes


def test_tool_result_string_content_equals_one_text_block():
    a = make_anthropic_body(messages=[user([tool_result("t", "out")])])
    b = make_anthropic_body(messages=[user([tool_result("t", [text("out")])])])
    assert canonicalize(A, a).hashes == canonicalize(A, b).hashes


def test_key_order_and_nulls_do_not_change_hashes():
    a = make_anthropic_body(tools=[make_tool("x")], messages=[user([text("hi")])])
    b = copy.deepcopy(a)
    b["tools"][0] = dict(reversed(list(b["tools"][0].items())))
    b["messages"][0]["content"][0]["citations"] = None
    assert canonicalize(A, a).hashes == canonicalize(A, b).hashes


def test_role_is_part_of_the_hash():
    p = canonicalize(A, make_anthropic_body(messages=[user("same"), assistant("same")]))
    assert p.segments[0].hash != p.segments[1].hash


def test_non_prompt_parameters_stay_out_of_segments():
    a = canonicalize(A, make_anthropic_body(max_tokens=100, temperature=0.0, stream=False))
    b = canonicalize(A, make_anthropic_body(max_tokens=9000, temperature=1.0, stream=True, tool_choice={"type": "any"}))
    assert a.hashes == b.hashes
    assert b.params["stream"] is True and b.params["tool_choice"] == {"type": "any"}


def test_reminders_whole_and_embedded():
    body = make_anthropic_body(
        messages=[
            user(
                [
                    text(reminder("Todo list is empty.")),
                    text(reminder("a") + "\n" + reminder("b")),
                    text("Please fix " + reminder("embedded") + " the bug"),
                ]
            )
        ]
    )
    p = canonicalize(A, body)
    assert kinds(p) == ["reminder", "reminder", "user_text"]
    assert is_reminder(reminder("x")) and not is_reminder("x " + reminder("y"))
    found, rest = split_reminders("a " + reminder("r") + " b")
    assert found == [reminder("r")] and rest == "a  b"


def test_assistant_text_is_never_a_reminder():
    p = canonicalize(A, make_anthropic_body(messages=[user("q"), assistant(reminder("x"))]))
    assert kinds(p) == ["user_text", "assistant_text"]


def test_images_documents_and_thinking():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    body = make_anthropic_body(
        messages=[
            user([image, doc, text("what is this?")]),
            assistant(
                [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    text("A cat."),
                ]
            ),
            user([tool_result("t", [text("shot:"), dict(image)])]),
        ]
    )
    p = canonicalize(A, body)
    assert kinds(p) == ["image", "image", "user_text", "thinking", "thinking", "assistant_text", "tool_result"]
    assert p.segments[0].text == "" and p.segments[0].images == 1
    assert p.segments[3].text == "Let me look." and p.segments[4].text == ""
    assert p.segments[6].images == 1 and p.segments[6].text == "shot:"
    assert_pointers_resolve(p, body)


def test_server_tools_and_unknown_blocks():
    body = make_anthropic_body(
        messages=[
            user("search"),
            assistant(
                [
                    {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "x"}},
                    {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
                    {"type": "mystery", "value": 1},
                ]
            ),
        ]
    )
    p = canonicalize(A, body)
    assert kinds(p) == ["user_text", "tool_call", "tool_result", "other"]
    assert p.segments[3].text == '{"type":"mystery","value":1}'


def test_empty_content_becomes_one_message_segment():
    body = make_anthropic_body(messages=[user([]), assistant("x")])
    p = canonicalize(A, body)
    assert pointers(p) == ["/messages/0", "/messages/1/content"]
    assert_pointers_resolve(p, body)


def test_count_tokens_api_uses_the_same_view():
    body = make_anthropic_body(system="S", messages=[user("hi")])
    del body["max_tokens"]
    p = canonicalize("anthropic.count_tokens", body)
    assert p.api == "anthropic.count_tokens" and p.hashes == canonicalize(A, body).hashes


@pytest.mark.parametrize(
    "api,body",
    [
        ("gemini.generate", {"contents": []}),
        (None, {"messages": []}),
        (A, "not a dict"),
        (A, {"model": "m"}),
        (A, {"messages": "hello"}),
        (A, {"messages": [], "system": 5}),
        (A, {"messages": [], "tools": {"a": 1}}),
        (A, {"messages": ["not a message"]}),
        (CHAT, {"messages": {}}),
        (RESP, {"input": 5}),
        (RESP, {"input": ["x"]}),
        (RESP, {"model": "gpt-5"}),
    ],
)
def test_unknown_shapes_are_none(api, body):
    assert canonicalize(api, body) is None


def test_pointer_escaping():
    assert escape("a/b~c") == "a~1b~0c"
    assert escape(3) == "3"


# --- OpenAI Chat Completions ------------------------------------------------------------------


def chat_conversation():
    return make_chat_body(
        tools=[chat_tool("read_file"), chat_tool("bash")],
        messages=[
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Read a.py"},
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "ok"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ],
            },
        ],
        temperature=0.3,
        stream=True,
        prompt_cache_key="k1",
    )


def test_chat_segments_and_pointers():
    body = chat_conversation()
    p = canonicalize(CHAT, body)
    assert pointers(p) == [
        "/tools/0",
        "/tools/1",
        "/messages/0/content",
        "/messages/1/content",
        "/messages/2/tool_calls/0",
        "/messages/2/tool_calls/1",
        "/messages/3/content",
        "/messages/4/content/0",
        "/messages/5/content/0",
        "/messages/5/content/1",
    ]
    assert kinds(p) == [
        "tools",
        "tools",
        "system",
        "user_text",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "user_text",
        "image",
    ]
    assert p.segments[0].name == "read_file"
    assert (p.segments[4].name, p.segments[4].ref) == ("read_file", "c1")
    assert p.segments[6].ref == "c1" and p.segments[7].ref == "c2"
    assert p.cache_policy["prompt_cache_key"] == "k1"
    assert p.params == {"temperature": 0.3, "stream": True}
    assert_pointers_resolve(p, body)


def test_chat_normalisation():
    a = chat_conversation()
    b = copy.deepcopy(a)
    b["messages"][1]["content"] = [{"type": "text", "text": "Read a.py"}]  # string == one text part
    b["messages"][2]["annotations"] = []  # SDK round-trip noise
    b["messages"][2]["content"] = ""  # "" beside tool calls is no content
    b["messages"][4]["content"] = "ok"
    assert canonicalize(CHAT, a).hashes == canonicalize(CHAT, b).hashes
    c = copy.deepcopy(a)
    c["messages"][3]["tool_call_id"] = "other"
    assert canonicalize(CHAT, c).hashes[6] != canonicalize(CHAT, a).hashes[6]


def test_chat_developer_role_is_system_and_empty_message_is_kept():
    body = make_chat_body(messages=[{"role": "developer", "content": "Rules."}, {"role": "assistant", "content": None}])
    p = canonicalize(CHAT, body)
    assert kinds(p) == ["system", "other"] and pointers(p) == ["/messages/0/content", "/messages/1"]


def test_chat_legacy_functions():
    body = make_chat_body(
        functions=[{"name": "f", "parameters": {}}],
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "done"},
        ],
    )
    p = canonicalize(CHAT, body)
    assert pointers(p) == ["/functions/0", "/messages/0/content", "/messages/1/function_call", "/messages/2/content"]
    assert kinds(p) == ["tools", "user_text", "tool_call", "tool_result"]
    assert_pointers_resolve(p, body)


# --- OpenAI Responses -------------------------------------------------------------------------


def responses_conversation():
    return make_responses_body(
        instructions="You are Codex.",
        tools=[{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        input=[
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox: on"}]},
            {"role": "user", "content": "list files"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Use ls."}],
                "encrypted_content": "xyz",
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "shell",
                "arguments": '{"cmd":"ls"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "One file.", "annotations": []}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "thanks"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                ],
            },
        ],
        prompt_cache_key="thread-1",
        prompt_cache_retention="24h",
        reasoning={"effort": "high"},
    )


def test_responses_segments_and_pointers():
    body = responses_conversation()
    p = canonicalize(RESP, body)
    assert pointers(p) == [
        "/tools/0",
        "/instructions",
        "/input/0/content/0",
        "/input/1/content",
        "/input/2",
        "/input/3",
        "/input/4",
        "/input/5/content/0",
        "/input/6/content/0",
        "/input/6/content/1",
    ]
    assert kinds(p) == [
        "tools",
        "system",
        "system",
        "user_text",
        "thinking",
        "tool_call",
        "tool_result",
        "assistant_text",
        "user_text",
        "image",
    ]
    assert p.segments[4].text == "Use ls."
    assert (p.segments[5].name, p.segments[5].ref, p.segments[6].ref) == ("shell", "call_1", "call_1")
    assert p.segments[6].text == "a.py"
    assert p.cache_policy["prompt_cache_retention"] == "24h"
    assert p.params == {"reasoning": {"effort": "high"}}
    assert p.previous_response_id is None and p.server_state is None
    assert_pointers_resolve(p, body)


def test_responses_input_forms_are_equal():
    forms = [
        "hello",
        [{"role": "user", "content": "hello"}],
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
    ]
    hashes = {canonicalize(RESP, make_responses_body(input=f)).hashes for f in forms}
    assert len(hashes) == 1


def test_responses_echoed_ids_and_status_do_not_change_hashes():
    a = responses_conversation()
    b = copy.deepcopy(a)
    del b["input"][5]["id"], b["input"][5]["status"], b["input"][3]["status"]
    assert canonicalize(RESP, a).hashes == canonicalize(RESP, b).hashes


def test_responses_breakpoint_marker_and_server_state():
    body = make_responses_body(
        input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": True}]}],
        previous_response_id="resp_1",
    )
    p = canonicalize(RESP, body)
    assert p.segments[0].breakpoint == {"prompt_cache_breakpoint": True}
    assert p.hashes == canonicalize(RESP, make_responses_body(input="x")).hashes
    assert p.previous_response_id == "resp_1" and p.server_state == "resp_1"
    assert "previous_response_id" not in p.params
    conv = canonicalize(RESP, make_responses_body(input="x", conversation={"id": "conv_9"}))
    assert conv.server_state == "conv_9"
    assert canonicalize(RESP, {"model": "gpt-5", "previous_response_id": "r"}).segments == ()


def test_prompt_tool_refs_and_hashes():
    body = make_chat_body(
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "data"},
        ]
    )
    p = canonicalize(CHAT, body)
    assert dict(p.tool_refs.names) == {"c1": "read"} and set(p.tool_refs.results) == {"c1"}
    assert isinstance(p.hashes, Hashes) and p.hashes == tuple(s.hash for s in p.segments)
    again = pickle.loads(pickle.dumps(p))
    assert again == p and again.hashes == p.hashes and again.tool_refs == p.tool_refs
