"""Archive compaction: the watermark, every skip rule, savings, tool_archive with receipts vs tool_trim without read."""

from __future__ import annotations

from pathlib import Path

from ctxscope.agent.context.compaction.archive import (
    TOOL_ARCHIVE,
    TOOL_TRIM,
    apply_archive,
    is_control_tool,
    plan_archive,
)
from ctxscope.agent.context.compaction.events import context_events
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.messages import assistant_message
from ctxscope.agent.core.tools import Tool
from ctxscope.agent.providers.scripted import answer, tool_call

from support.agent_context_fixtures import BLOB, blob, kib_text, make_rt, round_messages, user

KIB = 1024


def history():
    """Rounds: A (candidate), todowrite (control), C (error), D (small), E (candidate), F-J (recent), K (unfinished)."""
    msgs = [user("start")]
    msgs += round_messages("A", kib_text("A", 40))
    msgs += round_messages("todo", kib_text("todo", 10), name="todowrite")
    msgs += round_messages("C", kib_text("C", 40), error=True)
    msgs += round_messages("D", kib_text("D", 1))
    msgs += round_messages("E", kib_text("E", 40))
    for tag in "FGHIJ":
        msgs += round_messages(tag, kib_text(tag, 40))
    msgs.append(assistant_message("", [tool_call("blob", {"tag": "K"}, id="call_K")]))  # results not in yet
    return msgs


def test_plan_picks_only_old_finished_plain_results():
    plan = plan_archive(history(), ContextSettings(min_savings_kib=64))
    assert plan.holds and plan.reason == "over_watermark"
    assert [c.call_id for c in plan.candidates] == ["call_A", "call_E"]
    assert plan.skipped == {"control": 1, "error": 1, "small": 1, "recent": 5, "unfinished": 1}
    assert plan.tool_bytes > 256 * KIB


def test_plan_needs_the_watermark_the_savings_and_the_switch():
    msgs = history()
    assert plan_archive(msgs, ContextSettings()).reason == "savings_too_small"  # 80 KiB of candidates < 256 KiB
    assert plan_archive(msgs, ContextSettings(watermark_kib=1024)).reason == "under_watermark"
    assert plan_archive(msgs, ContextSettings(enabled=False, min_savings_kib=64)).reason == "disabled"
    assert plan_archive(msgs, ContextSettings(min_savings_kib=64, keep_recent_rounds=10)).reason == "no_candidates"


def test_control_tools_are_recognised():
    for name in ("skill", "ask_user", "todowrite", "update_plan", "exit_plan_mode", "goal_update", "set_goal"):
        assert is_control_tool(name)
    assert not is_control_tool("bash") and not is_control_tool("planet")


async def test_apply_writes_artifacts_with_receipts_or_trims_without_read(tmp_path):
    _rt, _model, s = make_rt(tmp_path)
    msgs = history()
    plan = plan_archive(msgs, ContextSettings(min_savings_kib=64))
    res = apply_archive(msgs, plan, s.view, has_read=True, turn=3, step=4)
    assert res.mode == TOOL_ARCHIVE and res.archived == 2 and len(res.artifacts) == 2
    a = res.messages[2].tool_results[0]
    assert Path(a.details["archived"]["artifact"]).read_text() == kib_text("A", 40)
    assert "read(path=" in a.content and a.details["archived"]["bytes"] == len(kib_text("A", 40))
    assert res.saved_bytes > 75 * KIB and msgs[2].tool_results[0].content == kib_text("A", 40)  # input untouched
    assert res.messages[6] == msgs[6]  # the errored result stays as it was
    trimmed = apply_archive(msgs, plan, s.view, has_read=False, turn=3, step=4)
    t = trimmed.messages[2].tool_results[0]
    assert trimmed.mode == TOOL_TRIM and "cannot be" in t.content and "trimmed" in t.details
    assert not trimmed.artifacts
    again = plan_archive(res.messages, ContextSettings(min_savings_kib=1, watermark_kib=100))
    assert again.reason == "no_candidates" and again.skipped["archived"] == 2  # never archived twice


ASK = Tool("ask_user", "ask", {"type": "object", "properties": {}}, lambda args, ctx: _text(kib_text("ask", 16)))


async def _text(t):
    return t


def long_turn():
    steps = [
        answer("", blob("r1", kib=16)),
        answer("", tool_call("ask_user", {}, id="call_ask")),
        answer("", blob("r2", kib=16, error=True)),
        answer("", blob("r3", kib=1)),
        answer("", blob("r4", kib=16)),
    ]
    steps += [answer("", blob(f"r{i}", kib=16)) for i in range(5, 10)]
    return steps + ["all done"]


SMALL = {"watermarkKiB": 64, "minSavingsKiB": 24, "keepRecentRounds": 5}


async def test_watermark_crossing_archives_the_right_candidates_mid_turn(tmp_path):
    _rt, model, s = make_rt(tmp_path, long_turn(), settings=SMALL, tools=(BLOB, ASK))
    r = await s.run("collect everything")
    assert r.ok and r.text == "all done" and not model.checkpoints  # no model call for an archive
    by_call = {res.tool_call_id: res for m in s.messages if m.role == "tool" for res in m.tool_results}
    assert {c for c, res in by_call.items() if "archived" in res.details} == {"call_r1", "call_r4"}
    assert Path(by_call["call_r4"].details["archived"]["artifact"]).read_text() == kib_text("r4", 16)
    assert by_call["call_ask"].content == kib_text("ask", 16)  # control tool
    assert by_call["call_r2"].content.startswith("r2 line") and by_call["call_r2"].is_error  # errored
    assert by_call["call_r3"].content.startswith("r3 line")  # too small
    assert all(by_call[f"call_r{i}"].content.startswith(f"r{i} line") for i in range(5, 10))  # recent rounds
    last = model.requests[-1]
    events = last.headers["x-ctxscope-event"]
    assert "compaction; stage=archive; mode=tool_archive; trigger=archive_plan" in events
    assert "tool_results_archived; mode=tool_archive; archived=2; saved_bytes=" in events
    assert last.messages == s.messages[:-1]  # the request went out on the archived history
    records = [e for e in context_events(s.view.dir) if e["event"] == "tool_results_archived"]
    assert len(records) == 1 and records[0]["archived"] == 2 and records[0]["saved_bytes"] > 24 * KIB
    assert [(i["tool"], i["call_id"], i["bytes"]) for i in records[0]["items"]] == [
        ("blob", "call_r1", len(kib_text("r1", 16))),
        ("blob", "call_r4", len(kib_text("r4", 16))),
    ]
    assert records[0]["items"][1]["artifact"] == by_call["call_r4"].details["archived"]["artifact"]
    replaced = [r for r in s.file.records() if r["type"] == "replace"]
    assert [r["reason"] for r in replaced] == ["compaction:archive"] and s.history.epoch == 1


async def test_without_read_the_archive_is_a_trim(tmp_path):
    _rt, model, s = make_rt(tmp_path, long_turn(), settings=SMALL, tools=(BLOB, ASK), core=False)
    assert (await s.run("collect everything")).ok
    trimmed = [res for m in s.messages if m.role == "tool" for res in m.tool_results if "trimmed" in res.details]
    assert [t.tool_call_id for t in trimmed] == ["call_r1", "call_r4"]
    assert "cannot be recovered" in trimmed[0].content and not list(s.view.artifacts_dir.iterdir())
    assert "mode=tool_trim" in model.requests[-1].headers["x-ctxscope-event"]


async def test_archiving_can_be_switched_off(tmp_path):
    _rt, model, s = make_rt(tmp_path, long_turn(), settings={**SMALL, "enabled": False}, tools=(BLOB, ASK))
    assert (await s.run("collect everything")).ok
    assert s.history.epoch == 0 and "x-ctxscope-event" not in model.requests[-1].headers
