"""`ctxscope demo`: the daemon, the simulator and our agent, in one scripted session that shows every effect.

The daemon starts as `ctxscope serve` would (proxy, capture writer, simulator at /u/sim, web UI).
Our agent then works in a temporary workspace, through the proxy, against the simulator with a
small context window; each turn of demo_script.py makes one kind of context management,
reminder, guard or recovery happen. When the last call is analysed, the command prints where
each effect landed, the session's cache discipline and the UI address, then keeps the daemon up
until Ctrl-C (``--once``: exit instead).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ctxscope.vocab.effects import parse_effect, split_effects
from ctxscope.vocab.headers import Annotation

from . import demo_script as script
from .options import CONTEXT, db_option
from .settings import DaemonConfig
from .tables import compaction_breaks

if TYPE_CHECKING:  # the agent, the simulator's client and the daemon are imported when the demo runs
    from ctxscope.agent.core.events import LlmCallPrepared
    from ctxscope.agent.core.spi import Extension
    from ctxscope.simulator.control.client import SimulatorControl

    from .daemon import RunningDaemon

Echo = Callable[[str], None]
ANALYSIS_TIMEOUT_S = 60.0


@dataclass
class DemoResult:
    session: str
    url: str
    calls: int
    found: dict[str, int] = field(default_factory=dict)  # marker kind -> seq of the first call showing it
    missing: tuple[str, ...] = ()
    discipline: dict = field(default_factory=dict)


class _EffectLog:
    """Which effects each of the agent's requests declared (read from the prepared request's headers)."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.calls = 0

    def extension(self) -> Extension:
        from ctxscope.agent.core.events import Event
        from ctxscope.agent.core.spi import Extension

        def prepared(ev: LlmCallPrepared) -> None:
            self.calls += 1
            value = ev.call.headers.get(Annotation.EVENT) or ""
            self.effects += [e.kind for v in split_effects(value) if (e := parse_effect(v)) is not None]

        return Extension(
            "demo-progress",
            lambda api: api.on(Event.ON_LLM_CALL_PREPARED, prepared),
            "records which effects each request declared, for the demo's progress lines",
        )

    def take(self) -> tuple[int, list[str]]:
        out = (self.calls, list(dict.fromkeys(self.effects)))
        self.effects, self.calls = [], 0
        return out


async def run_scenario(
    proxy_url: str,
    sim: SimulatorControl,
    root: Path,
    echo: Echo,
    *,
    api: str = "anthropic",
    model: str = script.MODEL,
    settings: dict | None = None,
) -> str:
    """Run every scripted turn, scripting the simulator through ``sim`` (a SimulatorControl);
    returns the agent's session id (the inspector's session)."""
    from ctxscope.agent.context.compaction.outcome import CompactionOutcome, describe
    from ctxscope.agent.core.settings import HostOptions
    from ctxscope.agent.host.builtins import default_extensions, default_host_builtins
    from ctxscope.agent.host.runtime import AgentRuntime
    from ctxscope.agent.providers.catalog import make_client, resolve
    from ctxscope.agent.providers.retry import RetryPolicy

    workspace = script.make_workspace(root / "workspace")
    home = root / "agent-home"
    await asyncio.to_thread(sim.config, context_window=script.WINDOW)
    client = make_client(
        resolve(
            "sim", api=api, model=model, proxy=proxy_url, context_window=script.WINDOW, max_output_tokens=script.OUTPUT
        ),
        retry=RetryPolicy(max_retries=0),
    )
    log = _EffectLog()
    rt = AgentRuntime(
        client,
        home=home,
        workspace=workspace,
        extensions=[*default_extensions(), log.extension()],
        host_builtins=default_host_builtins(HostOptions(home, settings or script.SETTINGS)),
    )
    session = rt.create_session("ctxscope demo")
    echo(f"agent session {session.id}  (temporary workspace {workspace})")
    turns = script.turns()
    try:
        for i, turn in enumerate(turns, 1):
            echo(f"[{i}/{len(turns)}] {turn.title}")
            await asyncio.to_thread(sim.set_script, [] if turn.agentic else script.checkpoint_steps() + turn.steps)
            if turn.text is None:
                outcome = await rt.conversation.maintenance.compact(session.id, turn.compact)
                assert isinstance(outcome, CompactionOutcome)
                echo(f"      /compact: {describe(outcome)}")
                continue
            result = await session.run(turn.text, source="demo")
            calls, effects = log.take()
            if not result.ok:
                raise click.ClickException(f"turn {i} ended {result.outcome}: {result.reason}")
            shown = ", ".join(effects) or "none"
            echo(f"      {calls} model call(s); effects declared: {shown}")
            children = session.state.get("subagents") or {}
            for child, run in children.items():
                if run.get("turn") == session.turn:
                    echo(f"      sub-agent session {child}: {run['steps']} model call(s), {run['outcome']}")
            missed = [k for k in turn.expect if k not in effects]
            if missed:
                echo(f"      (this turn was meant to show {', '.join(missed)})")
    finally:
        await rt.aclose()
    return session.id


def count_model_requests(sim: SimulatorControl) -> int:
    """Model requests the simulator received (every one came through the proxy); ``sim`` is a
    SimulatorControl."""
    ends = ("/messages", "/chat/completions", "/responses")
    return len([r for r in sim.requests() if r["path"].endswith(ends)])


def wait_for_analysis(db_path: Path, session: str, expected: int, timeout: float = ANALYSIS_TIMEOUT_S) -> int:
    """Block until ``expected`` calls of the session are stored and analysed; returns how many are."""
    from ctxscope.inspector.store.analysis_rows import count_analysed

    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        try:
            done = count_analysed(db_path, session)
        except sqlite3.Error:
            done = 0
        if done >= expected:
            return done
        time.sleep(0.1)
    return done


def summarize(db_path: Path, session: str) -> tuple[dict[str, tuple[int, dict]], dict]:
    """The first call showing each marker kind (seq, marker) and the session's cache-discipline figures."""
    from ctxscope.inspector.store.analysis_queries import cache_discipline, session_timeline
    from ctxscope.inspector.store.queries import open_db

    db = open_db(db_path)
    try:
        timeline = session_timeline(db, session) or {"calls": []}
        discipline = cache_discipline(db, session=session)
    finally:
        db.close()
    found: dict[str, tuple[int, dict]] = {}
    for call in timeline["calls"]:
        for m in call.get("markers") or []:
            found.setdefault(m["kind"], (call["seq"], m))
    return found, discipline


def _describe(marker: dict) -> str:
    from ctxscope.inspector.analyses.marker_text import marker_summary

    return marker_summary(marker)


async def run_demo_session(daemon: RunningDaemon, db_path: Path, echo: Echo, *, once: bool = False) -> DemoResult:
    """On a started daemon: run the scenario, wait for its analysis and print where each effect landed."""
    if daemon.sim is None or await daemon.sim.start() is None:
        raise click.ClickException("the built-in simulator is not running (see the log above)")
    sim = daemon.sim.control()
    root = Path(tempfile.mkdtemp(prefix="ctxscope-demo-"))
    try:
        await asyncio.to_thread(sim.reset)
        session = await run_scenario(daemon.url, sim, root, echo)
        sent = await asyncio.to_thread(count_model_requests, sim)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    echo(f"waiting for the inspector to analyse {sent} calls ...")
    stored = await asyncio.to_thread(wait_for_analysis, db_path, session, sent)
    found, discipline = await asyncio.to_thread(summarize, db_path, session)
    echo("")
    echo("effects, on the call where each first took effect:")
    for kind in sorted(script.EXPECTED, key=lambda k: found[k][0] if k in found else 10**9):
        if kind in found:
            seq, marker = found[kind]
            echo(f"  call #{seq:<3} {kind:<25} {_describe(marker)}")
        else:
            echo(f"  (missing)  {kind}")
    echo("")
    for line in discipline_lines(discipline):
        echo(line)
    for line in await asyncio.to_thread(diagnosis_lines, db_path, session):
        echo(line)
    for line in await asyncio.to_thread(thread_lines, db_path, session):
        echo(line)
    url = f"{daemon.url}/#/session/{session}"
    echo("")
    if once:  # the daemon stops with the demo: its address would lead nowhere
        echo(f"session {session}: {stored} calls.  See it with: ctxscope session {session} --db {db_path}")
        echo(f"  or in the UI: ctxscope serve --db {db_path}, then open http://127.0.0.1:8787/#/session/{session}")
    else:
        echo(f"session {session}: {stored} calls.  Open {url}")
        echo(f"  or: ctxscope session {session} --db {db_path}")
    return DemoResult(
        session,
        url,
        stored,
        {k: v[0] for k, v in found.items()},
        tuple(k for k in script.EXPECTED if k not in found),
        discipline,
    )


async def demo_main(cfg: DaemonConfig, *, once: bool, echo: Echo) -> DemoResult:
    from .daemon import start_daemon

    daemon = await start_daemon(cfg)
    try:
        echo(f"ctxscope daemon on {daemon.url}  (captures: {cfg.db}); simulator window {script.WINDOW:,} tokens")
        result = await run_demo_session(daemon, cfg.db, echo, once=once)
        if not once:
            echo("The daemon keeps running (proxy, simulator and UI). Press Ctrl-C to stop.")
            await _wait_for_signal()
            echo("stopping: finishing open calls and writing captures...")
        return result
    finally:
        await daemon.stop()


def thread_lines(db_path: Path, session: str) -> list[str]:
    """The session's threads: the main thread and, under it, each side thread (the sub-agent's)."""
    from ctxscope.inspector.store.queries import open_db, session_threads

    db = open_db(db_path)
    try:
        tree = session_threads(db, session)
    finally:
        db.close()
    lines = []
    for top in tree:  # named as every view names them: "main T1", "side T2" (ctxscope calls --thread T2)
        lines.append(f"main T{top['index'] + 1} (thread {top['thread'][:12]}): {top['calls']} calls")
        lines += [
            f"  side T{t['index'] + 1} (thread {t['thread'][:12]}): {t['calls']} calls, from call #{t['first_seq']}"
            for t in top["children"]
        ]
    return lines


def diagnosis_lines(db_path: Path, session: str) -> list[str]:
    """The provider's cache diagnoses (our agent asks for them) against ctxscope's verdicts, and the
    first break the provider diagnosed, in words."""
    from ctxscope.inspector.analyses.cache.provider_agreement import diagnosis_sentence
    from ctxscope.inspector.store.analysis_queries import provider_agreement_counts
    from ctxscope.inspector.store.queries import list_calls, open_db

    db = open_db(db_path)
    try:
        c = provider_agreement_counts(db, "WHERE session = ?", [session], per_session=False)
        calls = list_calls(db, session=session, limit=None, newest_first=False)
    finally:
        db.close()
    rate = f"{c['rate']:.1%} agreement" if c["rate"] is not None else "no diagnosis"
    lines = [
        f"provider's cache diagnosis against ours: agree {c['agree']}, disagree {c['disagree']}, "
        f"pending {c['pending']}, none {c['none']} ({rate})"
    ]
    broke = next(
        (
            r
            for r in calls
            if r.get("cache_verdict") == "client_break" and (r.get("cache") or {}).get("provider_agreement")
        ),
        None,
    )
    if broke is not None:
        lines.append(f"  the break at call #{broke['seq']}: the provider says {diagnosis_sentence(broke['cache'])}")
    return lines


def discipline_lines(d: dict) -> list[str]:
    share = f"{d['prefix_kept_share']:.1%}" if d["prefix_kept_share"] is not None else "-"
    return [
        f"cache discipline: {d['prefix_kept']}/{d['comparable']} calls after the first are APPEND_ONLY or IDENTICAL "
        f"({share})",
        f"  {d['breaks']} break(s): {compaction_breaks(d)}; {d['lost_tokens']:,} tokens lost to breaks",
        f"breaks inside the previous call's cached prefix that are not compactions: {d['violations']}",
    ]


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


@click.command(context_settings=CONTEXT)
@click.option("--once", is_flag=True, help="Run the scenario, print the summary and exit (for scripts).")
@click.option("--port", type=int, default=None, help="Port for the daemon (default 8787; 0: any free port).")
@db_option
def demo(once: bool, port: int | None, db_path: Path | None) -> None:
    """Start the daemon and run a scripted agent session that shows every effect in the inspector."""
    from .settings import build_config

    try:
        cfg = build_config(config_file=None, host=None, port=port, db=db_path, upstream_options=(), allow_remote=False)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    ours = logging.getLogger("ctxscope")
    level = ours.level
    ours.setLevel(logging.WARNING)  # progress lines, not the agent's log
    existed = {p for p in _db_files(cfg.db) if p.exists()}
    try:
        result = run_demo(cfg, once=once)
    except OSError as exc:
        for p in _db_files(cfg.db):  # a demo that never started leaves no database behind
            if p not in existed:
                p.unlink(missing_ok=True)
        raise click.ClickException(f"cannot start the daemon on {cfg.host}:{cfg.port}: {exc}" + port_hint(exc)) from exc
    finally:  # a process that runs the demo in-process (a test, an embedding) keeps its logging
        ours.setLevel(level)
    if result is not None and result.missing:
        raise click.ClickException("the demo did not produce: " + ", ".join(result.missing))


def _db_files(db: Path) -> list[Path]:
    return [db, Path(f"{db}-wal"), Path(f"{db}-shm")]


def port_hint(exc: OSError) -> str:
    """What to do when the port is taken."""
    if exc.errno == errno.EADDRINUSE:
        return "\n(another program, perhaps another ctxscope, listens there: pick another port with --port)"
    return ""


def run_demo(cfg: DaemonConfig, *, once: bool) -> DemoResult | None:
    from .daemon import run

    box: list[DemoResult] = []

    async def main() -> None:
        box.append(await demo_main(cfg, once=once, echo=click.echo))

    run(main())
    return box[0] if box else None
