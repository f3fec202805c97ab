"""The o200k estimate, and the usage anchor's binding, epochs and kept_message_count."""

from __future__ import annotations

import json

from ctxscope.agent.core.estimate import (
    MESSAGE_OVERHEAD,
    AnchorBinding,
    UsageAnchor,
    anchor_index,
    estimate_request,
    footprint,
    message_tokens,
    prefix_hash,
    projection,
    tools_json,
)
from ctxscope.agent.core.messages import ToolResult, assistant_message, tool_message, user_message
from ctxscope.agent.core.model import ToolSpec
from ctxscope.vocab.tokens import count_tokens

from support.agent_context_fixtures import round_messages, user

TOOLS = (ToolSpec("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)


def test_estimate_is_system_plus_tool_json_plus_messages_in_o200k():
    msgs = [user("fix the bug"), *round_messages("a", "line one\nline two")]
    est = estimate_request("You are careful.", TOOLS, msgs)
    assert est.system == count_tokens("You are careful.")
    assert est.tools == count_tokens(tools_json(TOOLS)) and json.loads(tools_json(TOOLS))[0]["name"] == "read"
    assert est.messages == sum(count_tokens(projection(m)) + MESSAGE_OVERHEAD for m in msgs)
    assert est.total == est.system + est.tools + est.messages


def test_chinese_is_counted_not_guessed_from_characters():
    text = "上下文管理与压缩：单条工具输出的预算、自动压缩的两条阈值。" * 50
    tokens = message_tokens(user_message(text)) - MESSAGE_OVERHEAD
    assert tokens == count_tokens("user\n" + text)
    assert tokens > 2 * len(text) / 4  # characters / 4 would underestimate it more than twofold


def test_media_cost_tokens():
    plain = tool_message([ToolResult("c", "computer", "ok")])
    shot = tool_message([ToolResult("c", "computer", "ok", details={"media": [{"type": "image"}]})])
    assert message_tokens(shot) - message_tokens(plain) == 1600


def anchored(msgs, answer_index, *, epoch=1, total_in=5000, out=100, at=100.0, binding=None):
    b = binding or AnchorBinding("p", "api", "m", prefix_hash("sys", TOOLS))
    return UsageAnchor(b, epoch, msgs[answer_index].id, total_in, out, 4000, 0, at)


def test_footprint_takes_the_larger_of_estimate_and_anchor_plus_tail():
    msgs = [user("hi"), assistant_message("hello"), user("more please")]
    binding = AnchorBinding("p", "api", "m", prefix_hash("sys", TOOLS))
    a = anchored(msgs, 1)
    fp = footprint("sys", TOOLS, msgs, a, binding, epoch=1)
    assert fp.anchored == 5100 + message_tokens(msgs[2]) and fp.tokens == fp.anchored
    assert fp.source == "PROVIDER_USAGE_ANCHORED"
    small = anchored(msgs, 1, total_in=1, out=0)
    fp = footprint("sys", TOOLS, msgs, small, binding, epoch=1)
    assert fp.tokens == fp.local > fp.anchored


def test_anchor_is_bound_to_provider_api_model_prefix_and_epoch():
    msgs = [user("hi"), assistant_message("hello")]
    a = anchored(msgs, 1)
    ok = AnchorBinding("p", "api", "m", prefix_hash("sys", TOOLS))
    assert footprint("sys", TOOLS, msgs, a, ok, 1).anchored is not None
    for other in (
        AnchorBinding("q", "api", "m", ok.prefix_hash),
        AnchorBinding("p", "other", "m", ok.prefix_hash),
        AnchorBinding("p", "api", "m2", ok.prefix_hash),
        AnchorBinding("p", "api", "m", prefix_hash("x", TOOLS)),
    ):
        assert footprint("sys", TOOLS, msgs, a, other, 1).anchored is None
    assert footprint("sys", TOOLS, msgs, a, ok, epoch=2).anchored is None  # a replacement started a new epoch
    assert footprint("sys", TOOLS, msgs[:1], a, ok, 1).anchored is None  # its answer is not in this history


def test_kept_message_count_skips_anchors_in_the_kept_tail():
    old_answer = assistant_message("answer from before the compaction")
    summary = user_message("summary", kind="compaction_summary", kept_message_count=2, compacted_at=50.0)
    fresh = assistant_message("first answer after")
    msgs = [summary, user("kept input"), old_answer, user("next"), fresh]
    assert anchor_index(msgs, anchored(msgs, 2, at=999.0)) is None  # kept tail: saw the old context
    assert anchor_index(msgs, anchored(msgs, 4)) == 4
    bad = user_message("summary", kind="compaction_summary", kept_message_count=-1)
    assert anchor_index([bad, fresh], anchored([bad, fresh], 1)) is None


def test_legacy_summary_without_kept_count_falls_back_to_timestamps():
    summary = user_message("summary", kind="compaction_summary", compacted_at=50.0)
    ans = assistant_message("x")
    msgs = [summary, ans]
    assert anchor_index(msgs, anchored(msgs, 1, at=49.0)) is None  # older than the compaction
    assert anchor_index(msgs, anchored(msgs, 1, at=51.0)) == 1
    no_time = [user_message("summary", kind="compaction_summary"), ans]
    assert anchor_index(no_time, anchored(no_time, 1, at=51.0)) is None


def test_anchor_round_trips_through_session_state():
    msgs = [user("hi"), assistant_message("hello")]
    a = anchored(msgs, 1)
    assert UsageAnchor.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    assert UsageAnchor.from_dict({"binding": {}}) is None and UsageAnchor.from_dict(None) is None
