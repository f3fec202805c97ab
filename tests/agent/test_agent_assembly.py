"""User message assembly order and the one-complete-block rule for reminders."""

from __future__ import annotations

import pytest

from ctxscope.agent.core.assembly import (
    ReminderFormatError,
    assemble_user_message,
    assemble_user_text,
    reminder_block,
    validate_reminder,
)
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel
from ctxscope.agent.tools.core_tools import core_tools_extension

R = "<system-reminder>{}</system-reminder>"


def test_order_prefixes_extension_reminders_host_reminders_then_user_text():
    text = assemble_user_text(["PREFIX"], [R.format("ext")], [R.format("host")], "my question")
    assert text == f"PREFIX\n\n{R.format('ext')}\n\n{R.format('host')}\n\nmy question"


def test_genuine_query_is_marked():
    m = assemble_user_message(["P"], [], [R.format("h")], "the real ask", source="cli")
    assert m.meta["genuine_text"] == "the real ask" and m.meta["source"] == "cli" and m.text.endswith("the real ask")


@pytest.mark.parametrize(
    "bad",
    [
        "plain text",
        "<system-reminder>unclosed",
        "<system-reminder>a</system-reminder><system-reminder>b</system-reminder>",
        "before <system-reminder>x</system-reminder>",
        "<system-reminder>x</system-reminder> after",
        "<system-reminder><system-reminder>x</system-reminder>",
    ],
)
def test_anything_but_one_complete_block_is_an_error(bad):
    with pytest.raises(ReminderFormatError):
        validate_reminder(bad)
    with pytest.raises(ReminderFormatError):
        assemble_user_text([], [], [bad], "q")


def test_empty_reminders_are_dropped():
    assert validate_reminder("  \n ") == "" and reminder_block() == ""
    assert assemble_user_text([" "], ["", "  "], [""], "q") == "q"
    assert validate_reminder(f"\n {R.format('x')} \n") == R.format("x")
    assert reminder_block("a", "", "b") == "<system-reminder>\na\nb\n</system-reminder>"


async def test_the_turn_message_follows_a4_and_declares_the_reminder_effect(tmp_path):
    def init(api):
        api.contribute_user_prompt_prefix("[plan mode is on]")
        api.register_reminder_provider(lambda c: R.format("low"), priority=1)
        api.register_reminder_provider(lambda c: R.format("high"), priority=9)

    model = ScriptedModel(["ok"])
    rt = AgentRuntime(
        model,
        home=tmp_path / "h",
        workspace=tmp_path,
        extensions=[core_tools_extension(), Extension("plan", init)],
        host_builtins=[],
        host_reminders=[lambda c: R.format(f"host turn {c.turn}")],
    )
    s = rt.create_session()
    await s.run("do it")
    first = model.requests[0].messages[0]
    assert first.text == "\n\n".join(
        ["[plan mode is on]", R.format("high"), R.format("low"), R.format("host turn 1"), "do it"]
    )
    assert first.meta["genuine_text"] == "do it"
    assert model.requests[0].headers["x-ctxscope-event"] == "reminder"


async def test_malformed_host_reminder_fails_the_turn(tmp_path):
    model = ScriptedModel(["ok"])
    rt = AgentRuntime(
        model, home=tmp_path / "h", workspace=tmp_path, host_builtins=[], host_reminders=[lambda c: "not a block"]
    )
    r = await rt.create_session().run("do it")
    assert r.outcome == "failed" and "system-reminder" in r.reason and model.requests == []
