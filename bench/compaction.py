#!/usr/bin/env python
"""Context management on a scripted long session, against the provider simulator's prompt-cache model.

The agent (128,000-token window, 16,000 output tokens: trigger line 96,000) works through a
scripted session: each turn the user pastes some material, the model runs sized tool calls (one
output is over 64 KiB and goes to an artifact) and answers at length. Along the way the archive
stage runs (tool results over the watermark) and, later, automatic checkpoints. The same session
runs once per checkpoint mode — ``reuse`` (the live system prompt and tools stay the checkpoint
request's prefix) and ``separate`` (the checkpoint prompt, no tools) — against a fresh simulator,
for the Anthropic API (explicit cache breakpoints) and OpenAI Chat (automatic prefix caching).

Printed per run: each stage with its trigger, tokens before -> after, the rung reached and wall
time; then the share of the checkpoint requests' input tokens that were cache reads. A second
scenario gives the agent a system prompt that fills most of the trigger line, where every
compaction would leave it over the line again: the thrash guard must stop it after one.
A "thrash loop" is an automatic line-triggered compaction in the same or the next turn as the
previous one. The last line reads
``checkpoint cache reads: reuse mode X%, separate mode Y%; thrash loops: 0``.

    .venv/bin/python bench/compaction.py          # ~15 s on 2 cores
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxscope.agent.context.compaction.auto import context_management_extension
from ctxscope.agent.context.compaction.checkpoint import SECTIONS
from ctxscope.agent.context.compaction.events import context_events
from ctxscope.agent.context.tool_output_budget import tool_output_budget_extension
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.tools import Tool, ToolOutput
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.simulator.app import create_app

WINDOW, OUTPUT = 128_000, 16_000
MODELS = {"anthropic": "claude-sonnet-4-5", "openai-chat": "gpt-4.1"}
WORDS = (
    "config",
    "parser",
    "request",
    "handler",
    "cache",
    "budget",
    "session",
    "artifact",
    "token",
    "marker",
    "stream",
    "window",
    "summary",
    "module",
    "extension",
    "history",
)


def text_of(tag: str, kib: float) -> str:
    """Deterministic, varied text of about ``kib`` KiB (varied so it tokenises like real output)."""
    out, size, n = [], 0, 0
    while size < kib * 1024:
        words = " ".join(WORDS[(n * 7 + k * 3) % len(WORDS)] for k in range(9))
        line = f"{tag}:{n:05d} {words} = {n * 37 % 1000}"
        out.append(line)
        size += len(line) + 1
        n += 1
    return "\n".join(out)


async def _emit(args: dict[str, Any], ctx: Any) -> ToolOutput:
    return ToolOutput(text_of(args["tag"], float(args["kib"])))


EMIT = Tool(
    "emit",
    "Print sized output.",
    {
        "type": "object",
        "properties": {"tag": {"type": "string"}, "kib": {"type": "number"}},
        "required": ["tag", "kib"],
    },
    _emit,
)


def _tools_ext() -> Extension:
    return Extension("bench-tools", lambda api: api.register_tool(EMIT))


def summary_text() -> str:
    return "\n".join(f"## {s}\n{text_of('summary', 0.3)}" for s in SECTIONS)


@dataclass
class Scenario:
    name: str
    turns: int
    calls_per_turn: tuple[float, ...]  # KiB per tool call
    paste_kib: float
    answer_kib: float
    huge_at: int = 3  # the turn with one output over 64 KiB
    system_prompt: str | None = None


HEALTHY = Scenario("long session", 30, (8,) * 10, 3, 1)
CRAMPED = Scenario(
    "cramped (system prompt fills the line)",
    6,
    (12, 12),
    4,
    1,
    system_prompt="Project rules:\n" + text_of("rules", 372),
)


def script_for(sc: Scenario) -> tuple[list[dict], list[str]]:
    steps: list[dict] = [{"match": "<checkpoint-request>", "text": summary_text()} for _ in range(12)]
    inputs = []
    for t in range(1, sc.turns + 1):
        inputs.append(f"Turn {t}: look at this material and continue.\n" + text_of(f"paste{t}", sc.paste_kib))
        for i, kib in enumerate(sc.calls_per_turn):
            size = 80 if (t == sc.huge_at and i == 0) else kib
            steps.append({"tool_calls": [{"name": "emit", "arguments": {"tag": f"t{t}c{i}", "kib": size}}]})
        steps.append({"text": f"Done with turn {t}.\n" + text_of(f"answer{t}", sc.answer_kib)})
    return steps, inputs


@dataclass
class Run:
    scenario: str
    api: str
    mode: str
    seconds: float
    stages: list[dict] = field(default_factory=list)
    checkpoint_input: int = 0
    checkpoint_cache_read: int = 0
    thrash_loops: int = 0
    stopped: str | None = None


async def run_once(sc: Scenario, api: str, mode: str, home: Path) -> Run:
    from aiohttp import web

    steps, inputs = script_for(sc)
    app = create_app(steps, context_window=1_000_000)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}" + ("" if api == "anthropic" else "/v1")
    client = make_client(
        resolve(
            "sim",
            api=api,
            model=MODELS[api],
            direct=True,
            base_url=base,
            context_window=WINDOW,
            max_output_tokens=OUTPUT,
        ),
        retry=RetryPolicy(max_retries=0),
    )
    settings = ContextSettings(checkpoint_mode=mode)
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    rt = AgentRuntime(
        client,
        home=home,
        workspace=ws,
        extensions=[core_tools_extension(), _tools_ext()],
        host_builtins=[
            context_management_extension(settings=settings),
            tool_output_budget_extension(settings=settings),
        ],
        system_prompt=sc.system_prompt,
    )
    session = rt.create_session()
    t0 = time.perf_counter()
    try:
        for text in inputs:
            result = await session.run(text)
            if not result.ok:
                raise SystemExit(f"{sc.name}/{api}/{mode}: turn {result.turn} {result.outcome}: {result.reason}")
    finally:
        await rt.aclose()
        await runner.cleanup()
    run = Run(sc.name, api, mode, time.perf_counter() - t0)
    auto_turns: list[int] = []
    for ev in context_events(session.view.dir):
        kind = ev["event"]
        if kind in ("tool_results_archived", "checkpoint", "compaction_failed"):
            run.stages.append(ev)
            if ev.get("status") == "completed" and ev.get("trigger") in ("threshold", "bytes", "overflow"):
                if auto_turns and ev["turn"] - auto_turns[-1] <= 1:
                    run.thrash_loops += 1
                auto_turns.append(ev["turn"])
            for a in ev.get("attempts") or []:
                if a["outcome"] in ("accepted", "invalid"):
                    run.checkpoint_input += a["input_tokens"]
                    run.checkpoint_cache_read += a["cache_read_tokens"]
        elif kind == "tool_output_externalized":
            run.stages.append(ev)
        elif kind == "compaction_stopped":
            run.stopped = ev.get("reason")
    return run


def share(read: int, total: int) -> float:
    return 100.0 * read / total if total else 0.0


def print_run(run: Run) -> None:
    print(f"\n{run.scenario} · {run.api} · {run.mode} mode · {run.seconds:.1f} s")
    for ev in run.stages:
        kind = ev["event"]
        if kind == "tool_output_externalized":
            print(f"  turn {ev['turn']:>2}  externalized  {ev['tool']} output, {ev['bytes']:,} bytes -> artifact")
            continue
        t = ev.get("timings") or {}
        secs = sum(t.values())
        if kind == "tool_results_archived":
            what = f"archive       {ev['mode']}, {ev['archived']} results, {ev['saved_bytes']:,} bytes saved"
        elif kind == "checkpoint":
            cps = [a for a in ev.get("attempts") or [] if a["outcome"] == "accepted"]
            cache = f", cache read {share(cps[-1]['cache_read_tokens'], cps[-1]['input_tokens']):.0f}%" if cps else ""
            what = f"checkpoint    rung {ev['rung']}, {ev['validation']}{cache}"
        else:
            what = f"failed        {ev.get('error')}"
        after = ev.get("tokens_after")
        print(
            f"  turn {ev['turn']:>2}  {what}; trigger {ev['trigger']}; tokens {ev['tokens_before']:,} -> "
            f"{after if after is None else format(after, ',')}; {secs * 1000:.0f} ms"
        )
    if run.stopped:
        print(f"  automatic compaction stopped: {run.stopped}")
    print(
        f"  checkpoint input tokens {run.checkpoint_input:,}, cache reads {run.checkpoint_cache_read:,} "
        f"({share(run.checkpoint_cache_read, run.checkpoint_input):.1f}%), uncached "
        f"{run.checkpoint_input - run.checkpoint_cache_read:,}; thrash loops {run.thrash_loops}"
    )


async def main() -> int:
    logging.getLogger("ctxscope.agent.compaction").setLevel(logging.ERROR)  # the guard's warning is printed below
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="ctxscope-bench-") as tmp:
        for sc in (HEALTHY, CRAMPED):
            for api in ("anthropic", "openai-chat"):
                for mode in ("reuse", "separate"):
                    run = await run_once(sc, api, mode, Path(tmp) / f"{len(runs)}")
                    print_run(run)
                    runs.append(run)
    healthy = [r for r in runs if r.scenario == HEALTHY.name]
    checkpoints = sum(1 for r in healthy for ev in r.stages if ev["event"] == "checkpoint")
    if not checkpoints or not all(any(ev["event"] == "tool_results_archived" for ev in r.stages) for r in healthy):
        print("the long session did not reach both an archive and a checkpoint", file=sys.stderr)
        return 1
    figures = {}
    for mode in ("reuse", "separate"):
        rs = [r for r in healthy if r.mode == mode]
        figures[mode] = share(sum(r.checkpoint_cache_read for r in rs), sum(r.checkpoint_input for r in rs))
    loops = sum(r.thrash_loops for r in runs)
    print(
        f"\ncheckpoint cache reads: reuse mode {figures['reuse']:.1f}%, separate mode {figures['separate']:.1f}%; "
        f"thrash loops: {loops}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
