#!/usr/bin/env python
"""Cache discipline of our agent on the demo's scripted session, as the inspector sees it.

The scripted session of ``ctxscope demo`` (an externalised output, two archives, an automatic
checkpoint, a runaway-guard reminder, an empty-answer retry, a /compact) runs through a real
daemon against the simulator once per wire API, and once more with a turn deadline. For each run
the inspector's verdicts give: the share of calls after the first that are APPEND_ONLY or IDENTICAL
(the prompt prefix was kept), the breaks (every other relation), how many of them are compactions
(a checkpoint request or the first call after a history replacement), the tokens lost to breaks, and the breaks that are
neither a compaction nor behind the previous call's last cache breakpoint. That last count must
be 0: the agent never rewrites what the provider has cached except when it compacts.

    .venv/bin/python bench/cache_discipline.py          # a few seconds
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path

from ctxscope import demo_script as script
from ctxscope.daemon import start_daemon
from ctxscope.demo import count_model_requests, run_scenario, wait_for_analysis
from ctxscope.inspector.store.analysis_queries import cache_discipline
from ctxscope.inspector.store.queries import open_db
from ctxscope.settings import DaemonConfig

# A turn deadline puts a request-only reminder at the end of every request: each call drops the
# previous call's, a break that must lie behind the previous call's last cache breakpoint.
DEADLINE = {**script.SETTINGS, "contextManagement": {"turnDeadlineSeconds": 600}}
RUNS = (
    ("anthropic", "claude-sonnet-4-5", None),
    ("openai-chat", "gpt-4.1", None),
    ("openai-responses", "gpt-4.1", None),
    ("anthropic", "claude-sonnet-4-5", DEADLINE),
)


async def run_once(api: str, model: str, settings: dict | None, tmp: Path) -> dict:
    name = api + ("-deadline" if settings else "")
    cfg = DaemonConfig(host="127.0.0.1", port=0, db=tmp / f"{name}.db")
    daemon = await start_daemon(cfg)
    try:
        await daemon.sim.start()  # it starts on its first use
        sim = daemon.sim.control()  # the built-in simulator runs in the daemon's child process
        session = await run_scenario(
            daemon.url, sim, tmp / name, lambda line: None, api=api, model=model, settings=settings
        )
        sent = await asyncio.to_thread(count_model_requests, sim)
        stored = await asyncio.to_thread(wait_for_analysis, cfg.db, session, sent)
        if stored < sent:
            raise SystemExit(f"{api}: only {stored} of {sent} calls were analysed")
    finally:
        await daemon.stop()
    db = open_db(cfg.db)
    try:
        return cache_discipline(db, session=session)
    finally:
        db.close()


def print_run(name: str, d: dict) -> None:
    print(
        f"\n{name}: {d['prefix_kept']}/{d['comparable']} calls after the first kept the prefix "
        f"(APPEND_ONLY or IDENTICAL): {d['prefix_kept_share']:.1%}"
    )
    print(
        f"  breaks {d['breaks']}, of them compactions {d['compaction_breaks']}; tokens lost to breaks "
        f"{d['lost_tokens']:,} ({d['lost_tokens_compactions']:,} to compactions)"
    )
    behind = [b for b in d["break_calls"] if not b["compaction"] and not b["inside_cached_prefix"]]
    for b in d["break_calls"]:
        if b in behind and len(behind) > 3:
            continue
        why = (
            "compaction"
            if b["compaction"]
            else "inside the cached prefix"
            if b["inside_cached_prefix"]
            else "behind the last breakpoint"
        )
        print(
            f"    call #{b['seq']:<3} {b['relation']:<9} at {b['pointer'] or b['epoch_reason'] or '-'}: {why}, "
            f"{b['lost_tokens']:,} tokens lost"
        )
    if len(behind) > 3:
        print(
            f"    {len(behind)} calls diverge behind the previous call's last breakpoint (the dropped request-only "
            f"reminder), {sum(b['lost_tokens'] for b in behind):,} tokens lost"
        )
    print(f"  breaks that are neither a compaction nor behind the previous call's last breakpoint: {d['violations']}")


async def main() -> int:
    logging.getLogger("ctxscope").setLevel(logging.WARNING)
    results = {}
    with tempfile.TemporaryDirectory(prefix="ctxscope-bench-") as tmp:
        os.environ["CTXSCOPE_HOME"] = str(Path(tmp) / "home")
        for api, model, settings in RUNS:
            name = api + (" with a turn deadline (a request-only reminder on every call)" if settings else "")
            results[name] = await run_once(api, model, settings, Path(tmp))
            print_run(name, results[name])
    violations = sum(d["violations"] for d in results.values())
    shares = ", ".join(
        f"{name.split(' ')[0]}{' + deadline' if ' ' in name else ''} {d['prefix_kept_share']:.1%}"
        for name, d in results.items()
    )
    print(f"\nprefix kept (APPEND_ONLY/IDENTICAL share): {shares}; violations: {violations}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
