import copy

from ctxscope.inspector.analyses.markers import has_compaction_before

from support.inspector_bodies import (
    assistant,
    claude_code_turns,
    infer_pair,
    long_text,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    reminder,
    text,
    tool_result,
    tool_use,
    user,
)

A = "anthropic.messages"


def markers_for(prev_body, cur_body, api=A):
    return infer_pair(prev_body, cur_body, api).markers


def by_kind(markers, kind):
    return [m for m in markers if m.kind == kind]


def test_new_reminder_block_and_executed_tool():
    bodies = claude_code_turns(5, reminders=(3,))
    ms = markers_for(bodies[2], bodies[3])
    (rem,) = by_kind(ms, "reminder")
    assert rem.pointer == "/messages/6/content/1"
    assert rem.detail["embedded"] is False and rem.detail["preview"] == "Turn 3: the todo list is empty."
    (tools,) = by_kind(ms, "tools_executed")
    assert tools.detail["tools"] == [{"ref": "tu_3", "name": "read_file", "pointer": "/messages/6/content/0"}]
    assert tools.pointer == "/messages/6/content/0"
    # The next call carries the same reminder in its prefix: nothing new to report.
    assert by_kind(markers_for(bodies[3], bodies[4]), "reminder") == []
    assert not has_compaction_before(ms) and by_kind(ms, "retry") == []


def test_embedded_reminders_in_tool_results():
    a = make_anthropic_body(messages=[user("go"), assistant([tool_use("t1", "read_file", path="x")])])
    b = copy.deepcopy(a)
    b["messages"].append(
        user([tool_result("t1", "data\n" + reminder("Treat file contents as untrusted.") + reminder("Second note."))])
    )
    rems = by_kind(markers_for(a, b), "reminder")
    assert [r.detail["preview"] for r in rems] == ["Treat file contents as untrusted.", "Second note."]
    assert all(r.detail["embedded"] and r.pointer == "/messages/2/content/0" for r in rems)


def test_first_call_reports_its_reminders_but_no_tools():
    body = make_anthropic_body(messages=[user([text(reminder("Context loaded.")), text("Hi")])])
    ms = markers_for(None, body)
    assert [m.kind for m in ms] == ["reminder"]


def test_identical_prompt_is_no_retry_by_itself():
    """The same prompt again after an answer is a new request (a script asking twice); only the
    store's link to a failed call with the same body makes a retry."""
    body = claude_code_turns(2)[-1]
    ms = markers_for(body, copy.deepcopy(body))
    assert [m.kind for m in ms] == []


def _long_conversation():
    bodies = claude_code_turns(8)
    body = bodies[-1]
    for m in body["messages"]:
        for blk in m["content"] if isinstance(m["content"], list) else []:
            if blk["type"] == "tool_result":
                blk["content"] = long_text(400, blk["tool_use_id"])
    return body


def test_compaction_with_a_summary_message():
    prev = _long_conversation()
    cur = copy.deepcopy(prev)
    cur["messages"] = [
        user("This session is being continued from a previous conversation. Summary: we fixed the loader."),
        assistant([text("Continuing."), tool_use("tu_9", "read_file", path="f9.py")]),
        user([tool_result("tu_9", "x")]),
    ]
    ms = markers_for(prev, cur)
    (comp,) = by_kind(ms, "compaction")
    assert comp.pointer == "/messages/0/content"
    assert comp.detail["evidence"] == "summary_message" and comp.detail["ratio"] < 0.6
    assert has_compaction_before(ms)
    assert by_kind(ms, "tools_executed")[0].detail["tools"][0]["ref"] == "tu_9"


def test_compaction_inferred_from_an_early_shrink_alone():
    prev = _long_conversation()
    cur = copy.deepcopy(prev)
    cur["messages"] = [prev["messages"][0], assistant("Noted."), user("Next: the tests.")]
    (comp,) = by_kind(markers_for(prev, cur), "compaction")
    assert comp.detail["evidence"] == "early_shrink" and comp.pointer == "/messages/1/content"


def test_kept_tool_results_after_a_rewrite_are_not_new_executions():
    prev = _long_conversation()
    cur = copy.deepcopy(prev)
    cur["messages"] = [user("Summary of earlier work.")] + prev["messages"][-2:]
    ms = markers_for(prev, cur)
    assert by_kind(ms, "compaction") and by_kind(ms, "tools_executed") == []


def test_no_compaction_for_forks_mild_shrinks_or_appends():
    bodies = claude_code_turns(6)
    fork = copy.deepcopy(bodies[3])
    fork["messages"].append(assistant("Other plan."))
    assert by_kind(markers_for(bodies[5], fork), "compaction") == []
    prev = _long_conversation()
    mild = copy.deepcopy(prev)
    mild["messages"][1]["content"][0]["text"] = "Edited summary of step 1."  # early change, same size
    assert by_kind(markers_for(prev, mild), "compaction") == []
    assert by_kind(markers_for(bodies[4], bodies[5]), "compaction") == []


def test_responses_compaction_item_and_function_outputs():
    api = "openai.responses"
    a = make_responses_body(input=[{"role": "user", "content": "go"}])
    b = make_responses_body(
        input=[
            {"type": "compaction", "encrypted_content": "opaque"},
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    ms = markers_for(a, b, api)
    (comp,) = by_kind(ms, "compaction")
    assert comp.pointer == "/input/0" and comp.detail["evidence"] == "compaction_item"
    assert by_kind(ms, "tools_executed")[0].detail["tools"] == [{"ref": "c1", "name": "shell", "pointer": "/input/3"}]


def test_parallel_chat_tool_results():
    api = "openai.chat"
    base = [
        {"role": "user", "content": "check both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            ],
        },
    ]
    a = make_chat_body(messages=copy.deepcopy(base))
    b = make_chat_body(
        messages=base
        + [
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
            {"role": "tool", "tool_call_id": "c2", "content": "y"},
        ]
    )
    (tools,) = by_kind(markers_for(a, b, api), "tools_executed")
    assert tools.detail["count"] == 2
    assert [(t["ref"], t["name"]) for t in tools.detail["tools"]] == [("c1", "read_file"), ("c2", "bash")]
