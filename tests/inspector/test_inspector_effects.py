"""Declared effects placed at the text they added or replaced, merged with the inferred markers of the
same meaning; inferred reminders carry their block's span (inspector/effects.py)."""

from __future__ import annotations

import copy

from ctxscope.inspector.analyses.effects import block_text, place_effects, sections
from ctxscope.inspector.analyses.marker_text import marker_summary
from ctxscope.inspector.pipeline.analysis_input import declared_markers

from support.inspector_bodies import (
    assistant,
    default_system,
    default_tools,
    infer_pair,
    long_text,
    make_anthropic_body,
    make_responses_body,
    reminder,
    text,
    tool_result,
    tool_use,
    user,
)

A = "anthropic.messages"
ROUND = reminder("<agent-context>\nagent: ctxscope-agent\n</agent-context>\n\n<todo-status>1 open</todo-status>")
GUARD = reminder("Runaway guard: the same call three times.")
TODO = reminder("Your todo list has not changed in the last 15 steps.")
DEADLINE = reminder("Time budget: about 30 seconds remain.")
RECEIPT = "[Tool output moved to a file]\nTool: bash\nSaved at: /h/sessions/s1/artifacts/t1s1-bash-x.txt (90000 bytes)"


def place(prev_body, cur_body, *effects, api=A):
    p = infer_pair(prev_body, cur_body, api)
    declared = declared_markers([("x-ctxscope-event", ", ".join(effects))]) if effects else []
    return place_effects(p.markers, declared, p.prev, p.cur, p.relation, cur_body)


def body(*messages):
    return make_anthropic_body(system=default_system(), tools=default_tools(), messages=list(messages))


def one(markers, kind):
    found = [m for m in markers if m.kind == kind]
    assert len(found) == 1, [(m.kind, m.pointer) for m in markers]
    return found[0]


def shown(b, m, span=None):
    """The exact text the UI shows for a marker."""
    full = block_text(b, m.pointer)
    span = span or m.detail.get("span")
    return full[span[0] : span[1]] if span else full


def test_round_reminder_is_the_block_in_front_of_the_users_words_one_marker_with_the_inferred():
    b = body(user([text(ROUND + "\n\nWhat went wrong?")]))
    ms = place(None, b, "reminder")
    m = one(ms, "reminder")
    assert m.pointer == "/messages/0/content/0" and shown(b, m) == ROUND
    assert m.detail["scope"] == "round" and m.detail["providers"] == ["agent_context", "todo_completion"]
    assert m.detail["declared"] and m.detail["inferred"] and m.detail["preview"].startswith("<agent-context>")


def test_in_turn_reminders_each_at_their_own_block():
    start = body(user("go"), assistant([tool_use("t1", "bash", command="false")]))
    # after a step: the result, the guard's steering message, an appended todo nudge, the request-only deadline
    b = copy.deepcopy(start)
    b["messages"].append(user([tool_result("t1", "exit 1", is_error=True), text(GUARD), text(TODO), text(DEADLINE)]))
    ms = place(
        start,
        b,
        "guard_signal; kind=repeated_action; count=3",
        "todo_reminder; since_todowrite=15; open=2",
        "guard_reminder; signal=repeated_action; count=3",
        "steer",
        "reminder; source=deadline; remaining_s=30",
    )
    assert shown(b, one(ms, "guard_reminder")) == GUARD
    assert shown(b, one(ms, "todo_reminder")) == TODO
    deadline = one(ms, "reminder")
    assert shown(b, deadline) == DEADLINE and deadline.detail["providers"] == ["deadline"]
    assert {one(ms, k).detail["scope"] for k in ("guard_reminder", "todo_reminder", "reminder")} == {"in_turn"}
    assert one(ms, "guard_signal").pointer == "/messages/2/content/0"  # the result the guard judged
    assert one(ms, "guard_reminder").detail["steer"] is True and not [m for m in ms if m.kind == "steer"]
    assert all(one(ms, k).detail.get("inferred") for k in ("guard_reminder", "todo_reminder", "reminder"))


def test_receipt_of_an_externalised_output_is_found_by_its_artifact():
    start = body(
        user("go"), assistant([tool_use("t1", "bash", command="cat a"), tool_use("t2", "bash", command="cat b")])
    )
    b = copy.deepcopy(start)
    b["messages"].append(user([tool_result("t1", "small"), tool_result("t2", RECEIPT)]))
    m = one(
        place(start, b, "tool_output_externalized; tool=bash; bytes=90000; artifact=artifacts/t1s1-bash-x.txt"),
        "tool_output_externalized",
    )
    assert m.pointer == "/messages/2/content/1" and shown(b, m) == RECEIPT
    assert (
        marker_summary({"kind": m.kind, "detail": m.detail}) == "bash output, 90,000 bytes → artifacts/t1s1-bash-x.txt"
    )


def _tool_rounds(n, size):
    msgs = [user("review")]
    for i in range(n):
        msgs += [
            assistant([tool_use(f"t{i}", "read_file", path=f"f{i}")]),
            user([tool_result(f"t{i}", long_text(size, f"r{i}"))]),
        ]
    return msgs


def test_archived_results_point_at_every_receipt_that_replaced_one():
    prev = body(*_tool_rounds(6, 300))
    cur = copy.deepcopy(prev)
    for i in (2, 4):
        cur["messages"][i]["content"][0]["content"] = f"[Older tool result moved to a file] f{i // 2 - 1}"
    ms = place(
        prev,
        cur,
        "compaction; stage=archive; trigger=archive_plan; tokens_before=2000; tokens_after=1500",
        "tool_results_archived; mode=tool_archive; archived=2; saved_bytes=4000",
    )
    arch = one(ms, "tool_results_archived")
    assert arch.detail["pointers"] == ["/messages/2/content/0", "/messages/4/content/0"]
    assert arch.pointer == "/messages/2/content/0" and one(ms, "compaction").pointer == arch.pointer
    assert "Older tool result moved" in shown(cur, arch)


def test_checkpoint_points_at_the_summary_and_absorbs_the_inferred_compaction():
    prev = body(*_tool_rounds(8, 400))
    summary = "The earlier part of this conversation was compacted into the summary below.\n## Goal\nship it"
    cur = body(user([text(summary), text(ROUND + "\n\nnext?")]))
    ms = place(
        prev,
        cur,
        "compaction; stage=checkpoint; trigger=threshold; rung=hall; tokens_before=9000; tokens_after=900",
        "checkpoint; rung=hall; validation=exact; mode=reuse; trigger=threshold; tokens_before=9000; tokens_after=900",
        "reminder",
    )
    comp, cp = one(ms, "compaction"), one(ms, "checkpoint")
    assert comp.pointer == cp.pointer == "/messages/0/content/0" and shown(cur, cp) == summary
    assert comp.detail["declared"] and comp.detail["inferred"] and comp.detail["evidence"] == "summary_message"
    assert shown(cur, one(ms, "reminder")) == ROUND  # the round block lies after the summary
    assert (
        marker_summary({"kind": "checkpoint", "detail": cp.detail})
        == "rung hall, exact (reuse mode, trigger threshold); 9,000 → 900 tokens"
    )


def test_checkpoint_request_is_its_control_message_not_a_compaction():
    prev = body(*_tool_rounds(8, 400))
    cur = copy.deepcopy(prev)
    cur["messages"] = cur["messages"][:1] + [user([text("<checkpoint-request>write the summary</checkpoint-request>")])]
    ms = place(prev, cur, "checkpoint_request; rung=hall; mode=reuse; trigger=threshold")
    req = one(ms, "checkpoint_request")
    assert shown(cur, req).startswith("<checkpoint-request>")
    assert not [m for m in ms if m.kind == "compaction"]


def test_empty_answer_retry_points_at_the_follow_up_and_drops_the_generic_retry():
    start = body(user("go"), assistant([tool_use("t1", "bash", command="ls")]), user([tool_result("t1", "a b")]))
    cur = copy.deepcopy(start)
    cur["messages"].append(user("Your tools all finished, but your reply was empty."))
    ms = place(start, cur, "empty_answer_retry; attempt=1", "retry")
    m = one(ms, "empty_answer_retry")
    assert "reply was empty" in shown(cur, m) and m.detail["retry"] is True
    assert [k.kind for k in ms] == ["empty_answer_retry"]


def test_effects_without_text_keep_no_pointer_and_read_well():
    b = body(user("go"))
    m = one(place(None, b, "reminder_dropped; source=todo_cadence"), "reminder_dropped")
    assert m.pointer is None
    assert (
        marker_summary({"kind": m.kind, "detail": m.detail})
        == "todo_cadence reminder dropped: it would push the request over the input limit"
    )


def test_a_declared_pointer_is_kept():
    b = body(user([text(ROUND + "\n\nhi")]))
    m = next(x for x in place(None, b, '{"kind": "reminder", "pointer": "/messages/0"}') if x.detail.get("declared"))
    assert m.pointer == "/messages/0"


def test_inferred_reminders_of_any_client_carry_their_span_and_sections():
    b = body(user([text("before " + reminder("<env>linux</env> plain") + " middle " + reminder("second") + " end")]))
    rems = [m for m in place(None, b) if m.kind == "reminder"]
    assert [shown(b, m) for m in rems] == [reminder("<env>linux</env> plain"), reminder("second")]
    assert rems[0].detail["sections"] == ["env"] and "sections" not in rems[1].detail
    assert not any(m.detail.get("declared") for m in rems)


def test_sections_are_the_top_level_tags():
    assert sections(reminder('<a x="1">in <b>nested</b></a>\n<c/>\n<a>again</a>')) == ["a", "c"]
    assert sections(reminder("no tags at all")) == []


def test_a_codex_shaped_compaction_is_inferred_at_its_late_summary():
    api = "openai.responses"
    ctx = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "<environment_context/>"},
        {"role": "user", "content": "<user_instructions/>"},
    ]
    asks = [{"role": "user", "content": f"request {i}"} for i in range(4)]
    history = []
    for i, ask in enumerate(asks):
        history += [
            ask,
            {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": long_text(500, f"o{i}")},
            {"role": "assistant", "content": [{"type": "output_text", "text": f"done {i}"}]},
        ]
    prev = make_responses_body(input=ctx + history)
    summary = "Another language model started to solve this problem and produced a summary of its work: ..."
    cur = make_responses_body(input=ctx + asks + [{"role": "user", "content": summary}])
    comp = one(place(prev, cur, api=api), "compaction")
    assert comp.detail["evidence"] == "summary_message" and comp.pointer == "/input/7/content"
