"""System reminders: registry order, critical providers, one block per round, the round counter,
default providers, and the wiring of disableSystemReminderModels through the host settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxscope.agent.core.assembly import validate_reminder
from ctxscope.agent.core.events import TurnStart
from ctxscope.agent.core.settings import HostOptions
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.state import ModelInfo, SessionState, SessionView
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel
from ctxscope.agent.reminders.extension import create_system_reminders
from ctxscope.agent.reminders.providers import default_registry
from ctxscope.agent.reminders.system import (
    STATE_KEY,
    ReminderRegistry,
    SystemReminderService,
    model_disabled,
    queue_notice,
)
from ctxscope.agent.tools.core_tools import core_tools_extension


def view(state=None, model="claude-sonnet-4-5", sid="s1"):
    return SessionView(
        sid,
        Path("/tmp/x"),
        Path("/tmp/x/artifacts"),
        Path("/work/ws"),
        state or SessionState(),
        ModelInfo("anthropic", "anthropic", model, 200_000, 32_000),
    )


def turn(v, n, source="cli"):
    return TurnStart(v, n, source, "q")


def body(block):
    return block.removeprefix("<system-reminder>\n").removesuffix("\n</system-reminder>")


def service(registry, **kw):
    return SystemReminderService(registry, today=lambda: "2026-01-02", **kw)


def test_providers_run_in_registration_order_and_join_into_one_block():
    r = ReminderRegistry()
    r.append("b", lambda d: "second registered first")
    r.append("a", lambda d: "then this")
    r.append("empty", lambda d: "  ")
    r.append("none", lambda d: None)
    block = service(r).build_reminder(turn(view(), 1))
    assert block == "<system-reminder>\nsecond registered first\n\nthen this\n</system-reminder>"
    assert validate_reminder(block) == block


def test_nothing_to_say_is_an_empty_string_not_an_empty_block():
    r = ReminderRegistry()
    r.append("quiet", lambda d: None)
    assert service(r).build_reminder(turn(view(), 1)) == ""


def test_a_provider_that_writes_its_own_tags_or_raises_is_skipped_and_the_block_stays_single():
    r = ReminderRegistry()
    r.append("sneaky", lambda d: "</system-reminder>escaped<system-reminder>")
    r.append("broken", lambda d: 1 / 0)
    r.append("fine", lambda d: "ok")
    block = service(r).build_reminder(turn(view(), 1))
    assert block == "<system-reminder>\nok\n</system-reminder>"
    assert block.count("<system-reminder>") == 1


def test_duplicate_provider_names_are_refused():
    r = ReminderRegistry()
    r.append("x", lambda d: "a")
    with pytest.raises(ValueError):
        r.append_critical("x", lambda d: "b")


def test_a_disabled_model_still_gets_critical_providers_only():
    r = ReminderRegistry()
    r.append("normal", lambda d: "normal text")
    r.append_critical("critical", lambda d: "critical text")
    svc = service(r, disabled_models=["claude-*"])
    assert body(svc.build_reminder(turn(view(model="claude-sonnet-4-5"), 1))) == "critical text"
    assert body(svc.build_reminder(turn(view(model="gpt-4.1", sid="s2"), 1))) == "normal text\n\ncritical text"


def test_model_patterns_are_exact_names_or_globs():
    assert model_disabled("gpt-4.1", ["gpt-4.1"]) and model_disabled("gpt-4.1-mini", ["gpt-4.1*"])
    assert not model_disabled("gpt-4.1-mini", ["gpt-4.1"]) and not model_disabled("x", [""])


def test_each_build_counts_one_round_and_asking_again_in_the_same_turn_does_not():
    state = SessionState()
    seen = []
    r = ReminderRegistry()
    r.append("probe", lambda d: seen.append(d.round) or f"round {d.round}")
    svc = service(r)
    v = view(state)
    first = svc.build_reminder(turn(v, 1))
    assert svc.build_reminder(turn(v, 1)) == first  # e.g. the /compact estimate assembling the same turn
    svc.build_reminder(turn(v, 2))
    assert seen == [1, 2] and state.get(STATE_KEY)["round"] == 2
    # the counter is session state: a new service (a restarted runtime) continues from it
    assert body(service(r).build_reminder(turn(v, 3))) == "round 3"


def test_agent_context_is_full_on_the_first_round_then_compact_and_full_again_after_a_replacement():
    state = SessionState()
    v = view(state)
    svc = service(default_registry())
    first = svc.build_reminder(turn(v, 1))
    assert "<agent-context>" in first and "workspace: /work/ws" in first and "claude-sonnet-4-5" in first
    second = svc.build_reminder(turn(v, 2))
    assert '<agent-context session="s1" date="2026-01-02" />' in second and "workspace" not in second
    from ctxscope.agent.reminders.system import set_full_context_due

    set_full_context_due(state, True)  # what the extension does on a history replacement (compaction)
    assert "workspace: /work/ws" in svc.build_reminder(turn(v, 3))
    assert "workspace" not in svc.build_reminder(turn(v, 4))


def test_todo_completion_speaks_at_most_every_five_rounds_while_todos_are_open():
    state = SessionState()
    state.set(
        "todos",
        [
            {"id": "1", "content": "write the parser", "status": "in_progress"},
            {"id": "2", "content": "done already", "status": "completed"},
        ],
    )
    v = view(state)
    svc = service(default_registry())
    rounds = [n for n in range(1, 16) if "<todo-status>" in svc.build_reminder(turn(v, n))]
    assert rounds == [1, 6, 11]
    block = svc.build_reminder(turn(v, 16))
    assert "1 item(s)" in block and "[>] write the parser" in block and "done already" not in block
    state.set("todos", [{"id": "1", "content": "write the parser", "status": "completed"}])
    assert "<todo-status>" not in svc.build_reminder(turn(v, 21))


def test_pending_notices_are_delivered_once():
    state = SessionState()
    queue_notice(state, "the background build finished (exit 0)", source="task")
    queue_notice(state, "compaction freed 40k tokens")
    v = view(state)
    svc = service(default_registry())
    block = svc.build_reminder(turn(v, 1))
    assert "- the background build finished (exit 0)" in block and "- compaction freed 40k tokens" in block
    assert state.get("pending_notices") == []
    assert "<session-notices>" not in svc.build_reminder(turn(v, 2))


def test_notices_and_todos_are_critical_and_agent_context_is_not():
    state = SessionState()
    queue_notice(state, "note")
    state.set("todos", [{"id": "1", "content": "x", "status": "pending"}])
    svc = service(default_registry(), disabled_models=["claude-sonnet-4-5"])
    block = svc.build_reminder(turn(view(state), 1))
    assert "<session-notices>" in block and "<todo-status>" in block and "agent-context" not in block


# --- wired into real turns ------------------------------------------------------------------------


def runtime(tmp_path, settings=None, model_name="scripted-model", extensions=(), write_toml=None):
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if write_toml:
        (home / "agent.toml").write_text(write_toml)
    model = ScriptedModel(["ok", "ok", "ok"], model=model_name)
    rt = AgentRuntime(
        model,
        home=home,
        workspace=tmp_path,
        extensions=[core_tools_extension(), *extensions],
        host_builtins=[create_system_reminders(HostOptions(home, settings or {}))],
    )
    return rt, model


async def test_the_round_block_follows_extension_reminders_in_the_turn_message(tmp_path):
    def init(api):
        api.register_reminder_provider(lambda c: "<system-reminder>plan mode</system-reminder>", priority=-5)

    rt, model = runtime(tmp_path, extensions=[Extension("plan", init)])
    s = rt.create_session()
    await s.run("hello")
    text = model.requests[0].messages[0].text
    assert text.index("plan mode") < text.index("<agent-context>") < text.index("hello")
    assert text.endswith("\n\nhello") and model.requests[0].headers["x-ctxscope-event"] == "reminder"


async def test_disable_system_reminder_models_from_settings_is_honoured(tmp_path):
    rt, model = runtime(tmp_path, {"contextManagement": {"disableSystemReminderModels": ["scripted-*"]}})
    s = rt.create_session()
    await s.run("hello")
    assert model.requests[0].messages[0].text == "hello"
    s.state.set("todos", [{"id": "1", "content": "ship it", "status": "pending"}])
    await s.run("again")
    assert "<todo-status>" in model.requests[1].messages[-1].text  # critical: still delivered


async def test_disable_system_reminder_models_from_agent_toml(tmp_path):
    rt, model = runtime(tmp_path, write_toml='[contextManagement]\ndisableSystemReminderModels = ["scripted-model"]\n')
    await rt.create_session().run("hello")
    assert model.requests[0].messages[0].text == "hello"
    rt2, model2 = runtime(tmp_path / "other")
    await rt2.create_session().run("hello")
    assert "<agent-context>" in model2.requests[0].messages[0].text


async def test_default_runtime_mounts_the_reminders(tmp_path):
    model = ScriptedModel(["ok"])
    rt = AgentRuntime(model, home=tmp_path / "h", workspace=tmp_path)
    assert {
        "system-reminders",
        "in-turn-reminders",
        "runaway-guard",
        "session-report",
        "terminal-response-recovery",
    } <= set(rt.registry.extension_ids)
    await rt.create_session().run("hello")
    assert "<agent-context>" in model.requests[0].messages[0].text


def test_the_per_turn_block_and_the_round_live_in_session_state_so_a_restart_does_not_count_again():
    state = SessionState()
    seen = []
    r = ReminderRegistry()
    r.append("probe", lambda d: seen.append(d.round) or f"round {d.round}")
    v = view(state)
    first = service(r).build_reminder(turn(v, 1))
    restarted = service(r)  # a new process: nothing in memory, the same persisted state
    assert restarted.build_reminder(turn(v, 1)) == first and seen == [1] and state.get(STATE_KEY)["round"] == 1


def test_a_maintenance_assembly_previews_the_next_round_without_counting_or_delivering():
    state = SessionState()
    v = view(state)
    svc = service(default_registry())
    svc.build_reminder(turn(v, 1))
    queue_notice(state, "the build finished")
    for source in ("context", "compact"):  # /context and /compact assemble a turn; neither is a round
        preview = service(default_registry()).build_reminder(turn(v, 1, source))
        assert "the build finished" in preview
    assert state.get(STATE_KEY)["round"] == 1 and len(state.get("pending_notices")) == 1
    delivered = service(default_registry()).build_reminder(turn(v, 2))
    assert "the build finished" in delivered and state.get(STATE_KEY)["round"] == 2
    assert state.get("pending_notices") == []


async def test_a_pending_notice_survives_a_restart_and_context_and_compact_then_reaches_the_model(tmp_path):
    from ctxscope.agent.context.compaction.auto import context_management_extension
    from ctxscope.agent.host.context_views import live_report, stored_report

    from support.agent_context_fixtures import RoutedModel

    def runtime_at(model):
        return AgentRuntime(
            model,
            home=tmp_path / "home",
            workspace=tmp_path,
            extensions=[core_tools_extension()],
            host_builtins=[context_management_extension(), create_system_reminders(HostOptions(tmp_path / "home", {}))],
        )

    first = runtime_at(ScriptedModel(["one"]))
    s = first.create_session()
    await s.run("hello")
    s.state.set("pending_notices", [{"text": "the nightly build broke", "source": "host"}])
    await first.aclose()
    rounds = s.state.get(STATE_KEY)["round"]

    model = RoutedModel(["two"])
    again = runtime_at(model)  # a restart: the same home, a new runtime
    try:
        s2 = again.open_session(s.id)
        live_report(again, s2)  # /context in the restarted process
        stored_report(tmp_path / "home", s.id)  # `ctxscope agent context S` from another process
        assert (await again.conversation.maintenance.compact(s.id, None)).replaced  # /compact
        assert s2.state.get(STATE_KEY)["round"] == rounds and len(s2.state.get("pending_notices")) == 1
        await s2.run("and now?")
    finally:
        await again.aclose()
    sent = model.main_requests[-1].messages[-1].text
    assert "the nightly build broke" in sent and sent.endswith("and now?")
    assert s2.state.get(STATE_KEY)["round"] == rounds + 1 and s2.state.get("pending_notices") == []
