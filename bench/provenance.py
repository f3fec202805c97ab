#!/usr/bin/env python
"""What source provenance adds to each step: a scripted session with 200 tool results.

MiniMax Code switched its provenance extension off everywhere while it chased a suspected stall of
the main thread. This bench measures ours on the work it does: a scripted model drives the real
loop through 4 turns of 50 tool steps each (reads of 1-48 KiB files at various offsets, greps,
fetches of 5-30 KiB pages and MCP lookups, from fake tools with no network), so the extension
indexes 200 tool results; each turn ends with a final answer that quotes a source (uncited the
first time: one retry), cites with variant syntax, or uses no source. The tool-output budget runs
too, so markers go through externalisation as in production.

Figures: the time spent inside the extension's handlers per step (timed wrappers around the very
handler objects the extension registers), p50 / p99 / max over all steps, as wall-clock time (what
the loop waits; blurred when other work shares the machine) and as process CPU time; wall time by
event; and the whole session's CPU time with and without the extension (median of 3 runs each; the
run without it has no citation retry, so one model call fewer).

    .venv/bin/python bench/provenance.py          # ~10 s
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxscope.agent.context.tool_output_budget import tool_output_budget_extension  # noqa: E402
from ctxscope.agent.core.budget import ContextSettings  # noqa: E402
from ctxscope.agent.core.events import Event  # noqa: E402
from ctxscope.agent.core.loop import LoopConfig  # noqa: E402
from ctxscope.agent.core.model import ModelRequest, PreparedCall, dumps  # noqa: E402
from ctxscope.agent.core.spi import Extension  # noqa: E402
from ctxscope.agent.core.tools import Tool, ToolOutput  # noqa: E402
from ctxscope.agent.host.runtime import AgentRuntime  # noqa: E402
from ctxscope.agent.provenance.extension import EXTENSION_ID, SYSTEM_PROMPT, SourceProvenance  # noqa: E402
from ctxscope.agent.provenance.marker import split_host_marker  # noqa: E402
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call  # noqa: E402
from ctxscope.agent.tools.core_tools import core_tools_extension  # noqa: E402

TURNS, STEPS = 4, 50
WORDS = [
    "cache",
    "request",
    "token",
    "prefix",
    "session",
    "model",
    "stream",
    "buffer",
    "header",
    "upstream",
    "record",
    "index",
    "thread",
    "compaction",
    "budget",
    "reminder",
    "guard",
    "receipt",
    "artifact",
    "history",
    "replay",
    "canonical",
    "segment",
    "pointer",
    "latency",
    "window",
    "usage",
    "estimate",
    "anchor",
    "provider",
    "schema",
    "marker",
    "source",
    "citation",
    "worker",
    "queue",
]


def prose(rng: random.Random, n_bytes: int) -> str:
    lines, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def workspace(root: Path, rng: random.Random) -> tuple[list[str], dict[str, str]]:
    files = []
    for i in range(120):
        rel = f"src/mod{i:03d}.txt"
        (root / "src").mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(prose(rng, rng.choice([1, 4, 8, 16, 32, 48]) * 1024 - 200))
        files.append(rel)
    pages = {f"https://docs.example/p{i}": prose(rng, rng.randint(5, 30) * 1024) for i in range(40)}
    return files, pages


def fake_tools(pages: dict[str, str]) -> Extension:
    async def fetch(args: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput(f"<html><title>Page {args['url'][-3:]}</title><body>{pages[args['url']]}</body></html>")

    async def lookup(args: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput(pages[args["url"]][:3000], details={"uri": f"kb://{args['url'][-3:]}", "title": "KB"})

    schema = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}

    def init(api: Any) -> None:
        api.register_tool(Tool("fetch", "fetch a page", schema, fetch))
        api.register_tool(Tool("mcp__kb__lookup", "knowledge base", schema, lookup))

    return Extension("bench-web", init)


def script(rng: random.Random, root: Path, files: list[str], pages: dict[str, str], retry: bool) -> list[Any]:
    items: list[Any] = []
    urls = list(pages)
    for turn in range(TURNS):
        for step in range(STEPS):
            kind = step % 5
            if step == 0:  # the file the turn's answer quotes
                call = tool_call("read", {"path": files[turn]})
            elif kind in (0, 1):
                call = tool_call("read", {"path": rng.choice(files), "offset": rng.choice([1, 1, 20, 80])})
            elif kind == 2:
                call = tool_call(
                    "grep", {"pattern": rng.choice(WORDS) + " " + rng.choice(WORDS), "path": "src", "max_results": 40}
                )
            elif kind == 3:
                call = tool_call("fetch", {"url": rng.choice(urls)})
            else:
                call = tool_call("mcp__kb__lookup", {"url": rng.choice(urls)})
            items.append(answer("", call))
        quoted = "\n".join((root / files[turn]).read_text().splitlines()[:3])
        if turn == 0:  # uncited quote: retried once (only asked for when the extension is on), then cited
            cited = f"Here is what it says [{files[turn]}:1-3]:\n{quoted}"
            items += [f"Here is what it says:\n{quoted}"] * retry + [cited]
        elif turn == 1:
            items.append(f"From the notes [source: S1] and [^S2]:\n{quoted}")
        elif turn == 2:
            items.append("The modules agree on the design; nothing needs to change.")
        else:
            items.append(f"{quoted}\n(see {files[turn]})")
    return items


class WireModel(ScriptedModel):
    """The scripted model with a provider-like body: result text goes on the wire, host ``details`` do not.

    (``ScriptedModel.prepare`` serialises whole history entries, details included, which would charge
    the provider-side cost of the references to the extension.)
    """

    def prepare(self, request: ModelRequest) -> PreparedCall:
        msgs = [
            {
                "role": m.role,
                "content": [
                    getattr(b, "text", None) or getattr(b, "content", None) or getattr(b, "arguments", None)
                    for b in m.content
                ],
            }
            for m in request.messages
        ]
        body = {
            "model": self.model,
            "system": request.system,
            "tools": [t.name for t in request.tools],
            "messages": msgs,
        }
        return PreparedCall(
            request, self.provider, self.api, self.model, "scripted://", dumps(body), dict(request.headers)
        )


class Timed:
    """The extension's own handlers, each wrapped with a clock; seconds per (turn, step) and per event."""

    def __init__(self, provenance: SourceProvenance) -> None:
        self.p = provenance
        self.by_step: dict[tuple[int, int], float] = defaultdict(float)
        self.cpu_by_step: dict[tuple[int, int], float] = defaultdict(float)
        self.by_event: dict[str, list[float]] = defaultdict(list)

    def extension(self) -> Extension:
        def wrap(event: str, fn: Any, is_async: bool = False) -> Any:
            async def timed_async(ctx: Any) -> Any:
                t, c = time.perf_counter(), time.process_time()
                try:
                    return await fn(ctx)
                finally:
                    self._add(event, ctx, time.perf_counter() - t, time.process_time() - c)

            def timed(ctx: Any) -> Any:
                t, c = time.perf_counter(), time.process_time()
                try:
                    return fn(ctx)
                finally:
                    self._add(event, ctx, time.perf_counter() - t, time.process_time() - c)

            return timed_async if is_async else timed

        def init(api: Any) -> None:
            api.contribute_system_prompt(SYSTEM_PROMPT)
            api.on(Event.TURN_START, wrap(Event.TURN_START, self.p.turn_start))
            api.on(Event.BEFORE_LLM_CALL, wrap(Event.BEFORE_LLM_CALL, self.p.before_llm_call))
            api.on(Event.AFTER_TOOL_CALL, wrap(Event.AFTER_TOOL_CALL, self.p.after_tool_call, True))
            api.on(Event.AFTER_LLM_CALL, wrap(Event.AFTER_LLM_CALL, self.p.after_llm_call))

        return Extension(EXTENSION_ID, init)

    def _add(self, event: str, ctx: Any, seconds: float, cpu: float) -> None:
        self.by_event[event].append(seconds)
        key = (ctx.turn, getattr(ctx, "step", 1))  # turn_start counts with step 1
        self.by_step[key] += seconds
        self.cpu_by_step[key] += cpu


async def session(with_provenance: bool, seed: int = 7) -> tuple[float, Timed | None, dict[str, Any]]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        files, pages = workspace(root, rng)
        model = WireModel(script(rng, root, files, pages, with_provenance), context_window=10_000_000)
        timed = Timed(SourceProvenance()) if with_provenance else None
        exts = [core_tools_extension(), fake_tools(pages)] + ([timed.extension()] if timed else [])
        budget = tool_output_budget_extension(
            settings=ContextSettings.from_mapping({"maxInlineKiB": 24}), split_marker=split_host_marker
        )
        rt = AgentRuntime(
            model,
            home=Path(tmp) / "home",
            workspace=root,
            extensions=exts,
            host_builtins=[budget],
            config=LoopConfig(max_steps=500),
        )
        s = rt.create_session()
        start = time.process_time()  # CPU time: other work on the machine does not blur the comparison
        for turn in range(TURNS):
            result = await s.run(f"turn {turn + 1}: look around")
            assert result.ok, result
        cpu = time.process_time() - start
        results = [r for m in s.messages if m.role == "tool" for r in m.tool_results]
        retries = sum(1 for m in s.messages if m.meta.get("kind") == "retry")
        facts = {
            "tool_results": len(results),
            "retries": retries,
            "steps": len(model.requests),
            "with_refs": sum(1 for r in results if r.details.get("source_references")),
            "externalised": sum(1 for r in results if "externalized" in r.details),
            "source_bytes": sum(len(r.content) for r in results),
        }
        if timed:
            st = timed.p.session(s.id)
            facts |= {
                "sources": len(st.catalog),
                "indexed_chars": st.quotes._chars,
                "fingerprints": len(st.quotes._index),
            }
        await rt.aclose()
        return cpu, timed, facts


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


async def main() -> None:
    cpu_on, cpu_off = [], []
    timed, facts, steps_off = None, {}, 0
    for _ in range(3):
        cpu, t, f = await session(True)
        cpu_on.append(cpu)
        if timed is None:
            timed, facts = t, f
        cpu, _, f = await session(False)
        cpu_off.append(cpu)
        steps_off = f["steps"]
    assert timed is not None
    per_step, cpu_step = list(timed.by_step.values()), list(timed.cpu_by_step.values())
    print(
        f"session: {facts['steps']} model calls, {facts['tool_results']} tool results "
        f"({facts['source_bytes'] / 1024:.0f} KiB of result text), {facts['with_refs']} with source references, "
        f"{facts['externalised']} externalised, {facts['retries']} citation retry"
    )
    print(
        f"sources in the catalog: {facts['sources']}; indexed {facts['indexed_chars'] / 1024:.0f} KiB of "
        f"normalised text, {facts['fingerprints']} fingerprints"
    )
    print(
        f"added per step ({len(per_step)} steps), wall: p50 {ms(pct(per_step, 50))}, p99 {ms(pct(per_step, 99))}, "
        f"max {ms(max(per_step))}, total {ms(sum(per_step))}"
    )
    print(
        f"added per step, CPU:  p50 {ms(pct(cpu_step, 50))}, p99 {ms(pct(cpu_step, 99))}, "
        f"max {ms(max(cpu_step))}, total {ms(sum(cpu_step))}"
    )
    print("by event (wall):")
    for event in (Event.AFTER_TOOL_CALL, Event.AFTER_LLM_CALL, Event.BEFORE_LLM_CALL, Event.TURN_START):
        xs = timed.by_event[event]
        print(f"  {event:<16} {len(xs):>4} calls: p50 {ms(pct(xs, 50))}, p99 {ms(pct(xs, 99))}, max {ms(max(xs))}")
    on, off = statistics.median(cpu_on), statistics.median(cpu_off)
    print(
        f"whole session CPU time, median of 3: with provenance {on:.3f} s ({facts['steps']} calls), "
        f"without {off:.3f} s ({steps_off} calls, no retry)"
    )


if __name__ == "__main__":
    asyncio.run(main())
