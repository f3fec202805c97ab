#!/usr/bin/env python
"""How precise the runaway guard is: true loops must be reminded early, legitimate work never.

Each scenario is a scripted model run by the provider simulator on loopback: the real agent loop
calls it over HTTP (OpenAI Chat wire API), runs the real tools (bash, read, edit, grep, plus three
bench tools below) in a scratch workspace, and the production guard (``create_runaway_guard``, the
default tool policies) judges every step. The bench reads the guard's own event log
(``runaway-guard.jsonl``) to see whether and at which step a reminder fired.

True loops: the same call unchanged; the same error family with varying arguments; A-B
alternation with identical results; a polled task whose status and output never move; a cycle
through three reads that bring nothing new. Legitimate work: edits of 30 different files; a build
polled until it finishes while its output advances (a task tool with a cursor, and bash reading a
growing log); greps that find nothing and then something (bash and the grep tool); a debugger
stepping; edit-and-retest until the tests pass.

"Step N of the loop" counts repetitions of the loop's body (one call for A-A-A, the pair A-B for
an alternation, three reads for a three-read cycle): a loop counts as caught when the reminder
fires by the third repetition. Bench tools: ``task_status``/``task_output`` (a simulated build:
``task_output`` returns new output and an advancing cursor per call when the scenario says so) and
``debugger`` (each ``next`` reaches the next source line).

    .venv/bin/python bench/guard.py            # ~5 s

The last line reads ``loops reminded by step 3: N/N; legitimate scenarios reminded: 0/M``.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxscope.agent.core.settings import HostOptions  # noqa: E402
from ctxscope.agent.core.spi import Extension, ExtensionAPI  # noqa: E402
from ctxscope.agent.core.tools import Tool, ToolContext, ToolOutput  # noqa: E402
from ctxscope.agent.guard.extension import EVENTS_FILE, create_runaway_guard  # noqa: E402
from ctxscope.agent.host.runtime import AgentRuntime  # noqa: E402
from ctxscope.agent.providers.catalog import make_client, resolve  # noqa: E402
from ctxscope.agent.tools.core_tools import core_tools_extension  # noqa: E402
from ctxscope.simulator.app import STATE_KEY, create_app, make_runner  # noqa: E402


def call(name: str, **arguments: Any) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@dataclass
class Scenario:
    name: str
    loop: bool
    steps: list[dict]
    period: int = 1  # steps per repetition of the loop body
    files: dict[str, str] = field(default_factory=dict)
    build_advances: bool = False


# --- bench tools ----------------------------------------------------------------------------------------


class Build:
    """A simulated background build for task_status/task_output."""

    def __init__(self, advances: bool, finish_after: int = 7) -> None:
        self.advances, self.finish_after, self.polls = advances, finish_after, 0

    def poll(self) -> tuple[str, int, str]:
        self.polls += 1
        if not self.advances:
            return "running", 120, "[ 40%] compiling src/parser.c"
        done = self.polls >= self.finish_after
        lines = [f"[{min(100, 12 * i)}%] compiling unit {i}" for i in range(1, self.polls + 1)]
        return ("finished" if done else "running"), 40 * self.polls, "\n".join(lines[-3:])


def bench_tools(build: Build) -> Extension:
    async def task_status(args: dict, ctx: ToolContext) -> ToolOutput:
        status, cursor, _ = build.poll()
        return ToolOutput(f"task {args.get('task_id')}: {status}", details={"status": status, "cursor": cursor})

    async def task_output(args: dict, ctx: ToolContext) -> ToolOutput:
        status, cursor, text = build.poll()
        return ToolOutput(f"{text}\n(status: {status})", details={"status": status, "cursor": cursor})

    line = {"n": 10}

    async def debugger(args: dict, ctx: ToolContext) -> str:
        line["n"] += 1
        return f"step -> src/parser.c:{line['n']}: token = next_token(lexer); /* n={line['n']} */"

    schema = {"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]}
    tools = [
        Tool("task_status", "Status of a background task.", schema, task_status),
        Tool("task_output", "New output of a background task.", schema, task_output),
        Tool(
            "debugger",
            "Send a command to the debugger.",
            {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
            debugger,
        ),
    ]

    def init(api: ExtensionAPI) -> None:
        for t in tools:
            api.register_tool(t)

    return Extension("bench-tools", init)


# --- scenarios ----------------------------------------------------------------------------------------------


def scenarios() -> list[Scenario]:
    check = "import config\nraise SystemExit('config.value is wrong: ' + repr(config.value))\n"
    loops = [
        Scenario("same call unchanged", True, [call("read", path="notes.txt")] * 6, files={"notes.txt": "todo\n"}),
        Scenario(
            "same error family, varying arguments",
            True,
            [call("bash", command=f"cat src/module_{n}.py") for n in range(6)],
        ),
        Scenario(
            "ABAB alternation",
            True,
            [call("read", path="config.py"), call("bash", command="python3 check.py")] * 4,
            period=2,
            files={"config.py": "value = 41\n", "check.py": check},
        ),
        Scenario("polling without change", True, [call("task_status", task_id="build-1")] * 6),
        Scenario(
            "no progress (three-read cycle)",
            True,
            [call("read", path=p) for p in ("a.py", "b.py", "c.py")] * 3,
            period=3,
            files={"a.py": "A = 1\n", "b.py": "B = 2\n", "c.py": "C = 3\n"},
        ),
    ]
    thirty = {f"pkg/mod_{n:02d}.py": "import old_name\n" for n in range(30)}
    fix_steps = []
    for n in range(4):
        fix_steps.append(
            call("edit", path="calc.py", old_string=f"return a + b + {n}", new_string=f"return a + b + {n + 1}")
        )
        fix_steps.append(call("bash", command="python3 test_calc.py"))
    legit = [
        Scenario(
            "batch edits of 30 different files",
            False,
            [call("edit", path=p, old_string="import old_name", new_string="import new_name") for p in thirty],
            files=thirty,
        ),
        Scenario(
            "build polled via task_output until it finishes",
            False,
            [call("task_output", task_id="build-1")] * 7,
            build_advances=True,
        ),
        Scenario(
            "build polled via bash while the log grows",
            False,
            [call("bash", command="echo compiled >> build.log; wc -l < build.log")] * 7,
        ),
        Scenario(
            "greps that find nothing, then something (bash)",
            False,
            [
                call("bash", command=f"grep -rn {w} src")
                for w in ("parse_header", "ParseHeader", "read_header", "header_parse", "load_header")
            ],
            files={"src/loader.py": "def load_header(f):\n    return f.read(4)\n"},
        ),
        Scenario(
            "greps that find nothing, then something (grep tool)",
            False,
            [
                call("grep", pattern=w, path="src")
                for w in ("parse_header", "ParseHeader", "read_header", "header_parse", "load_header")
            ],
            files={"src/loader.py": "def load_header(f):\n    return f.read(4)\n"},
        ),
        Scenario("debugger stepping", False, [call("debugger", command="next")] * 10),
        Scenario(
            "edit and re-run the tests until they pass",
            False,
            fix_steps,
            files={
                "calc.py": "def add(a, b):\n    return a + b + 0\n",
                "test_calc.py": "from calc import add\nassert add(2, 2) == 8, f'add(2, 2) = {add(2, 2)}'\n"
                "print('ok')\n",
            },
        ),
    ]
    return loops + legit


@dataclass
class Outcome:
    scenario: Scenario
    steps: int
    reminder_step: int | None
    signal: str | None

    @property
    def repetition(self) -> int | None:
        return None if self.reminder_step is None else math.ceil(self.reminder_step / self.scenario.period)


async def run_scenario(sc: Scenario, url: str, state: Any, tmp: Path) -> Outcome:
    ws = tmp / "ws"
    ws.mkdir(parents=True)
    for rel, text in sc.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    state.set_script([*sc.steps, {"text": "done"}])
    home = tmp / "home"
    home.mkdir()
    client = make_client(resolve("sim", api="openai-chat", model="gpt-4.1", direct=True, base_url=url + "/v1"))
    rt = AgentRuntime(
        client,
        home=home,
        workspace=ws,
        extensions=[core_tools_extension(), bench_tools(Build(sc.build_advances))],
        host_builtins=[create_runaway_guard(HostOptions(home, {}))],
    )
    try:
        session = rt.create_session()
        result = await session.run("work on the task", source="bench")
        log = rt.store.dir(session.id) / EVENTS_FILE
        events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    finally:
        await rt.aclose()
    reminders = [e for e in events if e["event"] == "runaway_guard_reminder_injected"]
    first = reminders[0] if reminders else None
    return Outcome(sc, result.steps - 1, first["step"] if first else None, first["kind"] if first else None)


async def main() -> int:
    from aiohttp import web

    runner = make_runner(create_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    url, state = f"http://{host}:{port}", runner.app[STATE_KEY]
    outcomes = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for i, sc in enumerate(scenarios()):
                outcomes.append(await run_scenario(sc, url, state, Path(d) / f"s{i}"))
    finally:
        await runner.cleanup()
    print(f"{'scenario':<52} {'kind':<6} {'steps':>5}  verdict")
    for o in outcomes:
        kind = "loop" if o.scenario.loop else "legit"
        if o.reminder_step is None:
            verdict = "no reminder"
        else:
            verdict = f"reminded at step {o.reminder_step} ({o.signal})"
            if o.scenario.loop:
                verdict += f", repetition {o.repetition} of the loop"
        print(f"{o.scenario.name:<52} {kind:<6} {o.steps:>5}  {verdict}")
    loops = [o for o in outcomes if o.scenario.loop]
    legit = [o for o in outcomes if not o.scenario.loop]
    caught = sum(1 for o in loops if o.repetition is not None and o.repetition <= 3)
    false_alarms = sum(1 for o in legit if o.reminder_step is not None)
    print(
        f"loops reminded by step 3: {caught}/{len(loops)}; legitimate scenarios reminded: {false_alarms}/{len(legit)}"
    )
    return 0 if caught == len(loops) and false_alarms == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
