"""SPI registration rules: contributions only inside init, duplicate tools, reminder priority,
per-session enable/disable, host builtins last and not replaceable."""

from __future__ import annotations

import pytest

from ctxscope.agent.core.events import Event, RewriteResult, TurnStart
from ctxscope.agent.core.spi import AssemblyError, Extension, Registry, SPIError
from ctxscope.agent.core.state import ModelInfo, SessionState, SessionView
from ctxscope.agent.core.tools import Tool
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension


def make_tool(name, text="ok"):
    async def run(args, ctx):
        return text

    return Tool(name, f"the {name} tool", {"type": "object", "properties": {}}, run)


def ext(id, init):
    return Extension(id, init)


def turn_ctx(tmp_path, turn=1):
    view = SessionView(
        "s1", tmp_path, tmp_path / "artifacts", tmp_path, SessionState(), ModelInfo("p", "a", "m", 1000, 100)
    )
    return TurnStart(view, turn, "test", "hello")


def make_rt(tmp_path, script=(), extensions=(), host_builtins=(), **kw):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension(), *extensions],
        host_builtins=list(host_builtins),
        **kw,
    )
    return rt, model


CONTRIBUTIONS = [
    ("register_tool", lambda api: api.register_tool(make_tool("late"))),
    ("contribute_system_prompt", lambda api: api.contribute_system_prompt("late")),
    ("contribute_user_prompt_prefix", lambda api: api.contribute_user_prompt_prefix("late")),
    ("register_reminder_provider", lambda api: api.register_reminder_provider(lambda ctx: "")),
    ("on", lambda api: api.on(Event.TURN_START, lambda e: None)),
]


@pytest.mark.parametrize("name,contribute", CONTRIBUTIONS, ids=[c[0] for c in CONTRIBUTIONS])
def test_contributions_after_init_raise(name, contribute):
    kept = {}

    def init(api):
        contribute(api)  # fine inside init
        kept["api"] = api

    Registry([ext("x", init)])
    with pytest.raises(SPIError, match="only be called inside init"):
        contribute(kept["api"])


def test_two_extensions_contributing_one_tool_name_fail_assembly(tmp_path):
    reg = Registry(
        [
            ext("a", lambda api: api.register_tool(make_tool("dup"))),
            ext("b", lambda api: api.register_tool(lambda ctx: [make_tool("dup")])),
        ]
    )
    with pytest.raises(AssemblyError, match="'dup' is contributed by both 'a' and 'b'"):
        reg.assemble(turn_ctx(tmp_path))


async def test_duplicate_tools_fail_the_turn_without_a_model_call(tmp_path):
    rt, model = make_rt(tmp_path, extensions=[ext("mine", lambda api: api.register_tool(make_tool("read")))])
    result = await rt.create_session().run("hi")
    assert result.outcome == "failed" and result.error_kind == "assembly" and "'read'" in result.reason
    assert model.requests == []


def test_reminders_sorted_by_priority_highest_first_stable(tmp_path):
    def a(api):
        api.register_reminder_provider(lambda c: "<system-reminder>low</system-reminder>", priority=1)
        api.register_reminder_provider(lambda c: "<system-reminder>high</system-reminder>", priority=10)
        api.register_reminder_provider(lambda c: "", priority=99)  # empty: dropped

    def b(api):
        api.register_reminder_provider(lambda c: "<system-reminder>mid-first</system-reminder>", priority=5)
        api.register_reminder_provider(lambda c: "<system-reminder>mid-second</system-reminder>", priority=5)

    got = Registry([ext("a", a), ext("b", b)]).assemble(turn_ctx(tmp_path)).reminders
    assert [r.split(">")[1].split("<")[0] for r in got] == ["high", "mid-first", "mid-second", "low"]


def test_malformed_reminder_fails_assembly(tmp_path):
    reg = Registry([ext("a", lambda api: api.register_reminder_provider(lambda c: "just text"))])
    with pytest.raises(AssemblyError, match="system-reminder"):
        reg.assemble(turn_ctx(tmp_path))


def test_tool_factory_is_evaluated_per_turn(tmp_path):
    seen = []

    def factory(ctx):
        seen.append(ctx.turn)
        return make_tool(f"t{ctx.turn}") if ctx.turn % 2 else None

    reg = Registry([ext("f", lambda api: api.register_tool(factory))])
    assert [t.name for t in reg.assemble(turn_ctx(tmp_path, 1)).tools] == ["t1"]
    assert reg.assemble(turn_ctx(tmp_path, 2)).tools == ()
    assert seen == [1, 2]


def test_system_prompt_and_prefix_contributions_in_extension_order(tmp_path):
    reg = Registry(
        [
            ext("a", lambda api: api.contribute_system_prompt("from a")),
            ext(
                "b",
                lambda api: (
                    api.contribute_system_prompt(lambda c: f"b turn {c.turn}"),
                    api.contribute_user_prompt_prefix("prefix b"),
                ),
            ),
        ]
    )
    a = reg.assemble(turn_ctx(tmp_path, 3), base_system_prompt="BASE")
    assert a.system_prompt == "BASE\n\nfrom a\n\nb turn 3"
    assert a.user_prefixes == ("prefix b",)


def test_registration_errors():
    with pytest.raises(SPIError, match="unknown event"):
        Registry([ext("a", lambda api: api.on("before_everything", lambda e: None))])
    with pytest.raises(SPIError, match="appends=True"):
        Registry([ext("a", lambda api: api.on(Event.AFTER_TOOL_CALL, lambda e: None, appends=True))])
    with pytest.raises(SPIError, match="failed in init"):
        Registry([ext("a", lambda api: 1 / 0)])

    async def async_init(api):
        pass

    with pytest.raises(SPIError, match="synchronous"):
        Registry([ext("a", async_init)])
    with pytest.raises(SPIError, match="used twice"):
        Registry([ext("a", lambda api: None), ext("a", lambda api: None)])


def test_an_event_named_by_its_plain_string_is_the_same_event(tmp_path):
    """An extension written without mypy may name the event by its string: it lands under the enum member."""
    reg = Registry(
        [
            ext("plain", lambda api: api.on("after_tool_call", lambda e: None)),
            ext("typed", lambda api: api.on(Event.AFTER_TOOL_CALL, lambda e: None)),
        ]
    )
    entries = reg.assemble(turn_ctx(tmp_path)).handlers_for(Event.AFTER_TOOL_CALL)
    assert [(e.extension_id, e.event) for e in entries] == [
        ("plain", Event.AFTER_TOOL_CALL),
        ("typed", Event.AFTER_TOOL_CALL),
    ]
    assert all(type(e.event) is Event for e in entries)


def test_configured_extension_cannot_replace_a_host_builtin():
    builtin = ext("runaway-guard", lambda api: None)
    with pytest.raises(SPIError, match="host builtins cannot be replaced"):
        Registry([ext("runaway-guard", lambda api: None)], [builtin])
    reg = Registry([ext("mine", lambda api: None)], [builtin])
    assert reg.extension_ids == ("mine", "runaway-guard") and reg.is_host_builtin("runaway-guard")


def test_host_builtin_handlers_run_after_configured_ones(tmp_path):
    h = lambda e: None  # noqa: E731
    host = ext("host", lambda api: (api.on(Event.AFTER_TOOL_CALL, h), api.on(Event.BEFORE_LLM_CALL, h)))
    reg = Registry(
        [
            ext("a", lambda api: api.on(Event.AFTER_TOOL_CALL, h)),
            ext("b", lambda api: api.on(Event.AFTER_TOOL_CALL, h)),
        ],
        [host],
    )
    order = [e.extension_id for e in reg.assemble(turn_ctx(tmp_path)).handlers_for(Event.AFTER_TOOL_CALL)]
    assert order == ["a", "b", "host"]


async def test_host_builtin_after_tool_call_sees_every_configured_rewrite(tmp_path):
    seen = []

    def host_init(api):
        api.on(Event.AFTER_TOOL_CALL, lambda e: seen.append(e.result.content))

    # the builtin is listed FIRST by its registrar but still runs last
    rt, _ = make_rt(
        tmp_path,
        [answer("", tool_call("ls", {})), "done"],
        extensions=[
            ext("rewriter", lambda api: api.on(Event.AFTER_TOOL_CALL, lambda e: RewriteResult(content="rewritten")))
        ],
        host_builtins=[ext("budget", host_init)],
    )
    await rt.create_session().run("go")
    assert seen == ["rewritten"]


async def test_enable_disable_per_session(tmp_path):
    calls = []

    def init(api):
        api.register_tool(make_tool("extra"))
        api.on(Event.TURN_START, lambda e: calls.append(e.session.id))

    rt, model = make_rt(tmp_path, ["a", "b", "c"], extensions=[ext("extra-ext", init)])
    s1, s2 = rt.create_session(), rt.create_session()
    s1.set_enabled("extra-ext", False)
    await s1.run("one")
    await s2.run("two")
    assert "extra" not in [t.name for t in model.requests[0].tools]
    assert "extra" in [t.name for t in model.requests[1].tools]
    assert calls == [s2.id]
    assert rt.store.get(s1.id).disabled_extensions == ("extra-ext",)
    # the choice is session state: a fresh runtime on the same home still has it off
    rt2, model2 = make_rt(tmp_path, ["x"], extensions=[ext("extra-ext", init)])
    await rt2.open_session(s1.id).run("three")
    assert "extra" not in [t.name for t in model2.requests[0].tools]
    s1.set_enabled("extra-ext", True)
    assert rt.store.get(s1.id).disabled_extensions == ()
    with pytest.raises(KeyError):
        s1.set_enabled("nope", False)
