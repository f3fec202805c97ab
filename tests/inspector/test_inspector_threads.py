import copy
import json

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.threads import (
    IDLE_GAP_S,
    RecentCall,
    choose_predecessor,
    explicit_session_id,
    grouped_by_source,
    place_call,
    thread_key,
)
from ctxscope.inspector.store.sessions import is_subagent_call, thread_order
from ctxscope.vocab.kinds import GroupedBy

from support.inspector_bodies import (
    assistant,
    claude_code_turns,
    default_tools,
    make_anthropic_body,
    make_responses_body,
    make_tool,
    text,
    user,
)

A = "anthropic.messages"
R = "openai.responses"
UUID = "4f9e2c1a-0b6d-4e8f-9a3b-1c2d3e4f5a6b"


def cp(body, api=A):
    return canonicalize(api, body)


def title_call(prompt_text="Fix the bug."):
    """A side call like Claude Code's title generation: other system prompt, no tools."""
    return make_anthropic_body(
        system=[text("Write a 3-word title for this request.")], messages=[user(prompt_text)], model="claude-haiku-4-5"
    )


# --- explicit session ids ---------------------------------------------------------------------


def test_label_beats_everything():
    headers = {"x-claude-code-session-id": "cc"}
    assert explicit_session_id(headers, {"prompt_cache_key": "k"}, "mylabel") == ("mylabel", "label")


def test_headers_in_order_of_strength():
    assert explicit_session_id({"x-ctxscope-session": "a", "session_id": "b"}, {}, None) == (
        "a",
        "header:x-ctxscope-session",
    )
    cc = explicit_session_id({"x-claude-code-session-id": UUID}, {}, None)
    assert cc == (UUID, "header:x-claude-code-session-id")
    assert explicit_session_id({"session_id": "codex-1"}, {}, None) == ("codex-1", "header:session_id")
    assert explicit_session_id({"session-id": "s"}, {}, None) == ("s", "header:session-id")
    assert explicit_session_id({"x-session-id": "x"}, {}, None) == ("x", "header:x-session-id")


def test_claude_code_metadata_user_id_forms():
    legacy = {"metadata": {"user_id": f"user_abc123_account_{UUID}_session_{UUID}"}}
    assert explicit_session_id({}, legacy, None) == (UUID, "metadata.user_id")
    as_json = {"metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "sess-42"})}}
    assert explicit_session_id({}, as_json, None) == ("sess-42", "metadata.user_id")
    assert explicit_session_id({}, {"metadata": {"user_id": "plain-user"}}, None) is None


def test_prompt_cache_key_and_previous_response_id():
    assert explicit_session_id({}, {"prompt_cache_key": "thread-7"}, None) == ("thread-7", "prompt_cache_key")
    body = {"previous_response_id": "resp_1"}
    assert explicit_session_id({}, body, None) is None  # nothing to resolve it with
    assert explicit_session_id({}, body, None, lambda rid: None) is None  # not captured
    assert explicit_session_id({}, body, None, {"resp_1": "S1"}.get) == ("S1", "previous_response_id")


def test_nothing_explicit():
    assert explicit_session_id({}, {"messages": []}, None) is None
    assert explicit_session_id({"session_id": ""}, "not json", None) is None


# --- thread keys ------------------------------------------------------------------------------


def test_thread_key_follows_the_system_prompt_not_the_messages():
    a, b = claude_code_turns(3), claude_code_turns(2, first="Another task.")
    assert thread_key(cp(a[0])) == thread_key(cp(a[2])) == thread_key(cp(b[1]))
    assert thread_key(cp(title_call())) != thread_key(cp(a[0]))
    more_tools = copy.deepcopy(a[0])
    more_tools["tools"].append(make_tool("mcp_search"))
    assert thread_key(cp(more_tools)) == thread_key(cp(a[0]))


def test_thread_key_without_system_uses_tool_names():
    a = make_anthropic_body(tools=default_tools(), messages=[user("x")])
    b = make_anthropic_body(tools=default_tools()[:1], messages=[user("x")])
    assert thread_key(cp(a)) != thread_key(cp(b))


# --- predecessors -----------------------------------------------------------------------------


def test_side_call_quoting_the_first_user_message_is_not_attached():
    main = claude_code_turns(1)[0]  # its only message equals the title call's
    assert choose_predecessor(cp(title_call("Fix the bug.")), [("m0", cp(main))]) == (None, 0)


def test_main_loop_with_interleaved_side_calls():
    main = claude_code_turns(4)
    side = title_call()
    recent = [("m0", cp(main[0])), ("t0", cp(side)), ("m1", cp(main[1])), ("t1", cp(title_call("other")))]
    assert choose_predecessor(cp(main[2]), recent) == ("m1", len(cp(main[1]).segments))
    # The side call has no predecessor among the main calls: it starts its own thread.
    assert choose_predecessor(cp(title_call("third")), recent[:1] + recent[2:3]) == (None, 0)
    # An identical side call repeated (a retry) attaches to its twin.
    assert choose_predecessor(cp(side), recent)[0] == "t0"


def test_sub_agent_sharing_the_tool_prefix_starts_its_own_thread():
    main = claude_code_turns(3)
    sub_tools = default_tools()[:2]  # same first tools as the main thread, then fewer
    sub = make_anthropic_body(
        system=[text("You are a search sub-agent.")], tools=sub_tools, messages=[user("Find the config loader.")]
    )
    recent = [("m0", cp(main[0])), ("m1", cp(main[1]))]
    assert choose_predecessor(cp(sub), recent) == (None, 0)
    sub2 = copy.deepcopy(sub)
    sub2["messages"] += [assistant("Looking."), user("continue")]
    recent.append(("s0", cp(sub)))
    recent.append(("m2", cp(main[2])))
    assert choose_predecessor(cp(sub2), recent)[0] == "s0"
    main3 = claude_code_turns(4)[3]
    assert choose_predecessor(cp(main3), recent)[0] == "m2"


def test_system_edit_and_model_switch_keep_the_thread():
    main = claude_code_turns(3)
    edited = copy.deepcopy(main[2])
    edited["system"][1]["text"] = "New rules."
    edited["model"] = "claude-opus-4-6"
    recent = [("m0", cp(main[0])), ("m1", cp(main[1])), ("m2", cp(main[2]))]
    assert choose_predecessor(cp(edited), recent) == ("m2", 4)


def test_system_edit_at_the_very_first_segment_still_matches_by_conversation():
    a = make_anthropic_body(system="Old.", messages=[user("task"), assistant("ok"), user("next")])
    b = make_anthropic_body(system="New.", messages=[user("task"), assistant("ok"), user("next"), assistant("x")])
    assert choose_predecessor(cp(b), [("a", cp(a))]) == ("a", 0)


def test_fork_prefers_the_call_it_extends():
    main = claude_code_turns(6)
    fork = copy.deepcopy(main[3])
    fork["messages"].append(assistant([text("Other plan.")]))
    recent = [("m3", cp(main[3])), ("m5", cp(main[5]))]
    n3 = len(cp(main[3]).segments)
    assert choose_predecessor(cp(fork), recent) == ("m3", n3)
    assert choose_predecessor(cp(fork), recent[1:]) == ("m5", n3)


def test_new_conversation_with_same_agent_attaches_to_the_latest_call():
    old = claude_code_turns(3)
    new = claude_code_turns(1, first="A brand new task.")[0]
    recent = [("m1", cp(old[1])), ("m2", cp(old[2]))]
    assert choose_predecessor(cp(new), recent) == ("m2", 5)


def test_other_apis_are_never_predecessors():
    body = make_anthropic_body(system="S", messages=[user("x")])
    count = dict(body)
    count.pop("max_tokens")
    recent = [
        ("c", canonicalize("anthropic.count_tokens", count)),
        ("r", cp(make_responses_body(), "openai.responses")),
    ]
    assert choose_predecessor(cp(body), recent) == (None, 0)
    assert choose_predecessor(cp(body), [("x", None)]) == (None, 0)


# --- placement --------------------------------------------------------------------------------


def test_place_call_in_an_explicit_session():
    main = claude_code_turns(3)
    recent = [
        RecentCall("m0", cp(main[0]), "S", "m0"),
        RecentCall("m1", cp(main[1]), "S", "m0"),
        RecentCall("t0", cp(title_call()), "S", "t0"),
        RecentCall("o0", cp(main[0]), "OTHER", "o0"),
    ]
    p = place_call("m2", cp(main[2]), ("S", "header:x-claude-code-session-id"), recent)
    assert (p.session_id, p.session_source, p.thread_id, p.predecessor, p.parent_thread_id) == (
        "S",
        "header:x-claude-code-session-id",
        "m0",
        "m1",
        None,
    )
    # Another title call: same side agent, so it continues the title thread.
    side = place_call("t1", cp(title_call("x")), ("S", "label"), recent)
    assert (side.thread_id, side.parent_thread_id, side.predecessor) == ("t0", None, "t0")
    # A sub-agent with its own system prompt: a new thread, child of the session's main thread.
    sub = make_anthropic_body(system="You are a reviewer.", tools=default_tools(), messages=[user("Review.")])
    child = place_call("s0", cp(sub), ("S", "label"), recent)
    assert (child.thread_id, child.parent_thread_id, child.predecessor) == ("s0", "m0", None)


def test_place_call_without_explicit_ids_infers_the_session():
    main = claude_code_turns(2)
    recent = [RecentCall("m0", cp(main[0]), "m0", "m0")]
    p = place_call("m1", cp(main[1]), None, recent)
    assert (p.session_id, p.session_source, p.thread_id, p.predecessor) == ("m0", "anon", "m0", "m0")
    assert p.grouped_by == GroupedBy.LINEAGE
    new = place_call("t0", cp(title_call()), None, recent, fallback=("key:k", "key"))
    assert (new.session_id, new.thread_id, new.parent_thread_id, new.grouped_by) == ("key:k:t0", "t0", None, "new")


def test_explicit_session_only_considers_its_own_calls():
    main = claude_code_turns(2)
    recent = [RecentCall("x0", cp(main[0]), "OTHER", "x0")]
    p = place_call("m1", cp(main[1]), ("S", "label"), recent)
    assert (p.predecessor, p.thread_id, p.parent_thread_id) == (None, "m1", None)


def test_linked_call_wins_for_server_side_state():
    first = make_responses_body(input="hi")
    second = make_responses_body(input="more", previous_response_id="resp_1")
    linked = RecentCall("r0", cp(first, "openai.responses"), "S", "r0")
    p = place_call("r1", cp(second, "openai.responses"), ("S", "previous_response_id"), [linked], linked=linked)
    assert (p.predecessor, p.thread_id, p.shared_segments) == ("r0", "r0", 0)


def test_unparseable_call_gets_its_own_thread():
    p = place_call("x", None, None, [RecentCall("m0", cp(claude_code_turns(1)[0]), "m0", "m0")])
    assert (p.predecessor, p.thread_id, p.session_id) == (None, "x", "anon")  # the key's catch-all session


# --- sessions without an id: lineage, client + gap, new (docs/architecture.md, "Sessions and threads") ---


def _unnamed(call_id, body, session, thread, t, api=A):
    return RecentCall(call_id, cp(body, api), session, thread, t)


def test_a_continuing_prompt_joins_its_conversation_whatever_came_between():
    main = claude_code_turns(3)
    other = make_anthropic_body(system="You answer geography.", messages=[user("Capital of France?")])
    recent = [_unnamed("m0", main[0], "S1", "m0", 0.0), _unnamed("o0", other, "S2", "o0", 5.0)]
    p = place_call("m1", cp(main[1]), None, recent, fallback=("key:k", "key"), time=10.0)
    assert (p.session_id, p.thread_id, p.predecessor, p.grouped_by, p.thread_start) == (
        "S1",
        "m0",
        "m0",
        GroupedBy.LINEAGE,
        False,
    )


def test_a_divergence_behind_the_first_user_turn_is_lineage_a_shared_system_prompt_alone_is_not():
    first = make_anthropic_body(
        system="You are a helper.", messages=[user("Question one?"), assistant("A."), user("Follow-up.")]
    )
    edited = make_anthropic_body(
        system="You are a helper.", messages=[user("Question one?"), assistant("A."), user("Another follow-up.")]
    )
    stranger = make_anthropic_body(system="You are a helper.", messages=[user("A different question?")])
    recent = [_unnamed("a0", first, "S1", "a0", 0.0)]
    diverged = place_call("a1", cp(edited), None, recent, fallback=("key:k", "key"), time=1.0)
    assert (diverged.session_id, diverged.predecessor, diverged.grouped_by) == ("S1", "a0", GroupedBy.LINEAGE)
    # Another run of the same script: same system prompt, another first question. No lineage; the same
    # client shortly after: a new thread of the same session.
    near = place_call("b0", cp(stranger), None, recent, fallback=("key:k", "key"), time=60.0)
    assert (near.session_id, near.thread_id, near.predecessor, near.grouped_by, near.thread_start) == (
        "S1",
        "b0",
        None,
        GroupedBy.CLIENT_GAP,
        True,
    )
    assert near.parent_thread_id == "a0"
    # With an explicit session id the old rule stands: a shared system prompt keeps the thread.
    named = place_call("b0", cp(stranger), ("S", "label"), [RecentCall("a0", cp(first), "S", "a0")])
    assert named.predecessor == "a0" and named.grouped_by == GroupedBy.LABEL


def test_after_a_long_idle_gap_without_lineage_a_new_session_begins():
    recent = [_unnamed("a0", claude_code_turns(1)[0], "key:k:a0", "a0", 0.0)]
    later = place_call(
        "t0", cp(title_call("Something else.")), None, recent, fallback=("key:k", "key"), time=IDLE_GAP_S + 1
    )
    assert (later.session_id, later.thread_id, later.grouped_by, later.thread_start) == (
        "key:k:t0",
        "t0",
        GroupedBy.NEW,
        False,
    )
    # ... and so does a call continuing it: lineage without an id holds only within the idle gap.
    resumed = place_call(
        "a1", cp(claude_code_turns(2)[1]), None, recent, fallback=("key:k", "key"), time=IDLE_GAP_S * 4
    )
    assert (resumed.session_id, resumed.predecessor, resumed.grouped_by) == ("key:k:a1", None, GroupedBy.NEW)
    soon = place_call("a1", cp(claude_code_turns(2)[1]), None, recent, fallback=("key:k", "key"), time=IDLE_GAP_S - 1)
    assert (soon.session_id, soon.predecessor, soon.grouped_by) == ("key:k:a0", "a0", GroupedBy.LINEAGE)


def test_a_side_call_that_started_before_the_latest_call_but_ended_after_it_joins_its_session():
    # A title call sent beside the main thread's second call, which ends first: the writer places the
    # main call first, then the title call, whose start is earlier than the latest call's.
    recent = [
        _unnamed("a0", claude_code_turns(1)[0], "key:k:a0", "a0", 100.0),
        _unnamed("a1", claude_code_turns(2)[1], "key:k:a0", "a0", 110.0),
    ]
    side = place_call("t0", cp(title_call("Fix the bug.")), None, recent, fallback=("key:k", "key"), time=109.5)
    assert (side.session_id, side.thread_id, side.parent_thread_id, side.grouped_by, side.thread_start) == (
        "key:k:a0",
        "t0",
        "a0",
        GroupedBy.CLIENT_GAP,
        True,
    )
    # Long before the latest call is no longer the same activity.
    old = place_call(
        "t1", cp(title_call("Fix the bug.")), None, recent, fallback=("key:k", "key"), time=110.0 - IDLE_GAP_S - 1
    )
    assert (old.session_id, old.grouped_by) == ("key:k:t1", GroupedBy.NEW)


def test_explicit_sources_name_how_the_call_was_grouped():
    assert [
        grouped_by_source(s)
        for s in ("label", "header:session_id", "metadata.user_id", "prompt_cache_key", "previous_response_id")
    ] == [
        GroupedBy.LABEL,
        GroupedBy.HEADER,
        GroupedBy.METADATA,
        GroupedBy.PROMPT_CACHE_KEY,
        GroupedBy.PREVIOUS_RESPONSE,
    ]
    first = place_call("x0", cp(claude_code_turns(1)[0]), ("S", "header:session_id"), [])
    assert (first.thread_start, first.grouped_by) == (False, GroupedBy.HEADER)
    side = place_call(
        "t0", cp(title_call()), ("S", "header:session_id"), [RecentCall("x0", cp(claude_code_turns(1)[0]), "S", "x0")]
    )
    assert (side.thread_start, side.parent_thread_id) == (True, "x0")


def _codex(items, instructions="You are Codex."):
    return make_responses_body(instructions=instructions, input=items, model="gpt-5-codex")


def _msg(role, content):
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": content}]}


def test_a_compaction_that_drops_a_developer_message_keeps_its_predecessor():
    dev_a, dev_b = _msg("developer", "Sandbox: workspace-write."), _msg("developer", "<env>cwd=/src</env>")
    task = _msg("user", "Fix the parser.")
    before = _codex(
        [
            dev_a,
            dev_b,
            task,
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    compacted = _codex([dev_a, _msg("user", "Summary of the work so far: the parser was fixed."), _msg("user", "Go.")])
    assert thread_key(cp(before, R)) != thread_key(cp(compacted, R))  # the system/developer prefix changed
    assert choose_predecessor(cp(compacted, R), [("b", cp(before, R))], strict=True) == ("b", 2)
    # Without a summary next to the kept prefix it is another agent with the same permissions.
    other = _codex([dev_a, _msg("user", "Write a poem.")])
    assert choose_predecessor(cp(other, R), [("b", cp(before, R))], strict=True) == (None, 0)


def test_the_same_conversation_in_another_api_is_its_predecessor():
    chat = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}],
    }
    responses = make_responses_body(
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another?"},
        ],
    )
    unrelated = make_responses_body(instructions="Be brief.", input=[{"role": "user", "content": "Hello."}])
    recent = [("c", cp(chat, "openai.chat"))]
    assert choose_predecessor(cp(responses, R), recent, strict=True) == ("c", 0)
    assert choose_predecessor(cp(unrelated, R), recent, strict=True) == (None, 0)  # the system prompt alone


def test_the_main_thread_is_the_agent_loop_not_the_first_call():
    threads = [
        {"thread": "title", "calls": 1, "tool_rounds": 0, "first_seq": 1},
        {"thread": "agent", "calls": 4, "tool_rounds": 3, "first_seq": 2},
        {"thread": "summary", "calls": 1, "tool_rounds": 0, "first_seq": 6},
    ]
    assert thread_order(threads) == ["agent", "title", "summary"]
    # Tool rounds outweigh call count: a chatty classifier is not the agent.
    threads.append({"thread": "classifier", "calls": 9, "tool_rounds": 0, "first_seq": 3})
    assert thread_order(threads)[0] == "agent"
    # Without tool rounds: most calls, then the earliest.
    plain = [
        {"thread": "a", "calls": 2, "tool_rounds": 0, "first_seq": 1},
        {"thread": "b", "calls": 2, "tool_rounds": 0, "first_seq": 3},
    ]
    assert thread_order(plain) == ["a", "b"]


def test_a_thread_a_sub_agent_declared_is_never_the_main_thread():
    parent = {"thread": "parent", "calls": 2, "tool_rounds": 1, "first_seq": 1}
    child = {"thread": "child", "calls": 3, "tool_rounds": 2, "first_seq": 2, "subagent": True}
    assert thread_order([parent, child]) == ["parent", "child"]
    assert thread_order([{**child, "subagent": False}, parent]) == ["child", "parent"]  # undeclared: the busier wins
    assert is_subagent_call('[["x-ctxscope-subagent", "s1"]]') and is_subagent_call([["x-ctxscope-subagent", "s1"]])
    assert not is_subagent_call('[["x-ctxscope-session", "s1"]]') and not is_subagent_call(None)
