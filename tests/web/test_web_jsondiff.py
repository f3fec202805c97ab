"""The web UI's structural diff of two request bodies (web/jsondiff.py)."""

from __future__ import annotations

from ctxscope.web.jsondiff import BUDGET_CHARS, CHANGE_CHARS, CONTEXT_CHARS, MAX_CHANGES, diff_bodies


def _anthropic(system="You are careful.", tools=None, messages=None, **params):
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "system": system,
        "messages": messages or [{"role": "user", "content": "hi"}],
    }
    if tools is not None:
        body["tools"] = tools
    body.update(params)
    return body


def _tool(name, desc="reads a file"):
    return {
        "name": name,
        "description": desc,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }


def test_identical_bodies_have_no_changes():
    d = diff_bodies(_anthropic(), _anthropic())
    assert d["identical_prompt"] and d["changes"] == [] and d["first_pointer"] is None and d["params"] == []


def test_appended_messages_are_one_insertion_each():
    old = _anthropic(messages=[{"role": "user", "content": "hi"}])
    new = _anthropic(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "go on"},
        ]
    )
    d = diff_bodies(old, new)
    assert [(c["op"], c["pointer"]) for c in d["changes"]] == [("added", "/messages/1"), ("added", "/messages/2")]
    assert d["changes"][0]["old"] is None and '"hello"' in d["changes"][0]["new"]


def test_first_difference_follows_cache_order_tools_before_system_before_messages():
    old = _anthropic(tools=[_tool("read")], messages=[{"role": "user", "content": "a"}])
    new = _anthropic(
        system="You are careless.", tools=[_tool("read", "reads any file")], messages=[{"role": "user", "content": "b"}]
    )
    d = diff_bodies(old, new)
    assert [c["pointer"] for c in d["changes"]] == ["/tools/0/description", "/system", "/messages/0/content"]
    assert d["first_pointer"] == "/tools/0/description"
    first = d["changes"][0]
    assert first["op"] == "changed" and first["old"] == "reads a file" and first["new"] == "reads any file"
    assert first["old_is_text"] and first["new_is_text"] and first["area"] == "tools"


def test_system_text_edit_points_into_the_block():
    old = _anthropic(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
    new = _anthropic(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "C"}])
    d = diff_bodies(old, new)
    assert d["first_pointer"] == "/system/1/text"
    assert (d["changes"][0]["old"], d["changes"][0]["new"]) == ("B", "C")


def test_cache_control_moves_are_listed_apart_not_as_changes():
    def block(text, cc=False):
        return {"type": "text", "text": text, **({"cache_control": {"type": "ephemeral"}} if cc else {})}

    old = _anthropic(
        messages=[{"role": "user", "content": [block("one", cc=True)]}, {"role": "assistant", "content": "x"}]
    )
    new = _anthropic(
        messages=[
            {"role": "user", "content": [block("one")]},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [block("two", cc=True)]},
        ]
    )
    d = diff_bodies(old, new)
    assert [(c["op"], c["pointer"]) for c in d["changes"]] == [("added", "/messages/2")]
    moves = d["marker_moves"]
    assert [m["pointer"] for m in moves["removed"]] == ["/messages/0/content/0/cache_control"]
    assert [m["pointer"] for m in moves["added"]] == ["/messages/2/content/0/cache_control"]


def test_string_content_equals_a_single_text_block():
    old = _anthropic(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "ok"},
        ]
    )
    new = _anthropic(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    assert diff_bodies(old, new)["identical_prompt"]
    changed = _anthropic(messages=[{"role": "user", "content": "ho"}, {"role": "assistant", "content": "ok"}])
    d = diff_bodies(old, changed)
    assert [(c["pointer"], c["old_pointer"]) for c in d["changes"]] == [
        ("/messages/0/content", "/messages/0/content/0/text")
    ]


def test_inserted_message_in_the_middle_is_one_insertion_not_a_cascade():
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10)]
    new = msgs[:4] + [{"role": "user", "content": "injected"}] + msgs[4:]
    d = diff_bodies(_anthropic(messages=msgs), _anthropic(messages=new))
    assert [(c["op"], c["pointer"]) for c in d["changes"]] == [("added", "/messages/4")]


def test_removed_messages_point_where_they_were():
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    d = diff_bodies(_anthropic(messages=msgs), _anthropic(messages=msgs[:2] + msgs[3:]))
    assert [(c["op"], c["pointer"], c["old_pointer"]) for c in d["changes"]] == [
        ("removed", "/messages/2", "/messages/2")
    ]
    assert '"m2"' in d["changes"][0]["old"] and d["changes"][0]["new"] is None


def test_parameters_outside_the_prompt_are_listed_apart():
    d = diff_bodies(_anthropic(temperature=0.2), _anthropic(max_tokens=200, stream=True))
    assert d["identical_prompt"]
    assert {(p["key"], p["op"]) for p in d["params"]} == {
        ("max_tokens", "changed"),
        ("temperature", "removed"),
        ("stream", "added"),
    }


def test_openai_chat_and_responses_shapes():
    old = {"model": "gpt-4o", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]}
    new = {"model": "gpt-4o", "messages": [{"role": "system", "content": "S2"}, {"role": "user", "content": "q"}]}
    assert diff_bodies(old, new)["first_pointer"] == "/messages/0/content"
    old = {
        "model": "gpt-5",
        "instructions": "I",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}],
    }
    new = {
        "model": "gpt-5",
        "instructions": "I",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "b"}]}],
    }
    assert diff_bodies(old, new)["first_pointer"] == "/input/0/content/0/text"


def test_pointers_escape_keys_per_rfc_6901():
    old = {"tools": [{"name": "t", "input_schema": {"properties": {"a/b~c": {"type": "string"}}}}], "messages": []}
    new = {"tools": [{"name": "t", "input_schema": {"properties": {"a/b~c": {"type": "integer"}}}}], "messages": []}
    assert diff_bodies(old, new)["first_pointer"] == "/tools/0/input_schema/properties/a~1b~0c/type"


def test_changes_are_capped_and_long_values_clipped():
    old = {"messages": [{"role": "user", "content": f"a{i}"} for i in range(MAX_CHANGES + 50)]}
    new = {"messages": [{"role": "user", "content": f"b{i}"} for i in range(MAX_CHANGES + 50)]}
    d = diff_bodies(old, new)
    assert len(d["changes"]) == MAX_CHANGES and d["truncated"]
    big = diff_bodies({"system": "x" * 300_000}, {"system": "y" * 300_000})
    assert big["changes"][0]["truncated"] and len(big["changes"][0]["new"]) == CHANGE_CHARS + 2 * CONTEXT_CHARS
    assert big["changes"][0]["new_chars"] == 300_000


def test_a_change_is_its_changed_run_with_a_little_identical_text_either_side():
    text = "α" * 50_000 + "OLD" + "ω" * 70_000
    d = diff_bodies({"system": text}, {"system": text.replace("OLD", "NEW!")})
    [ch] = d["changes"]
    assert ch["head_chars"] == 50_000 - CONTEXT_CHARS and ch["tail_chars"] == 70_000 - CONTEXT_CHARS
    assert ch["old"] == "α" * CONTEXT_CHARS + "OLD" + "ω" * CONTEXT_CHARS and "NEW!" in ch["new"]
    assert ch["old_chars"] == len(text) and not ch["truncated"] and not ch["deferred"]


def test_past_the_budget_changes_carry_pointers_and_sizes_only():
    old = {"messages": [{"role": "user", "content": f"{i} " + "x" * 20_000} for i in range(40)]}
    new = {"messages": [{"role": "user", "content": f"{i} " + "y" * 20_000} for i in range(40)]}
    d = diff_bodies(old, new)
    sent = sum(len(c["old"] or "") + len(c["new"] or "") for c in d["changes"])
    deferred = [c for c in d["changes"] if c["deferred"]]
    assert sent <= BUDGET_CHARS and deferred and all(c["old"] is None and c["new_chars"] > 20_000 for c in deferred)
    assert diff_bodies(old, new, budget=None)["changes"][-1]["new"] is not None


def test_non_object_bodies_compare_whole():
    d = diff_bodies([1, 2], [1, 3])
    assert d["first_pointer"] == "" and d["changes"][0]["op"] == "changed"
