#!/usr/bin/env python
"""How close the inspector's cache predictions come to what the provider reports, and whether any
verdict contradicts the reported usage (docs/architecture.md, "Cache verdicts").

Replays, through a real daemon whose writer analyses every call, against the simulator:

- the demo's scripted session once per wire API (Anthropic Messages, Chat Completions, Responses),
  as bench/cache_discipline.py drives it;
- crafted edits, sent with the real SDKs: an edit near the end of a long message (Chat and
  Responses, at three depths), a read of an entry an older call wrote (not the predecessor), and a
  pi-like first call whose write is below the table's minimum (the simulator plays a provider
  that caches from 1,024 tokens on a model the table puts at 2,048).

For every call with usage the predicted read is rescaled to the provider's units (reported prompt
over estimate) like the verdict does; the error of a call that read or was predicted to read is
|predicted - read| / max(predicted, read). The last line is

    prediction error: median X%, p95 Y%; verdicts contradicting reported usage: N

On 2 shared cores it took about ten seconds and printed median 0.0%, p95 4.0%, 0 contradictions
(117 calls; the worst are OpenAI calls one 128-token step off, where the o200k estimate's share of
the provider's framing tokens falls on the other side of a step). The analysis before learned
minimums, token prefixes and older entries gave median 1.0%, p95 100.0% and 6 contradictions on
the same traffic: a `below_minimum` with a 1,400-token write, and five `client_break`s where the
provider read what was predicted lost.

    .venv/bin/python bench/cache_prediction.py          # about ten seconds
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai

from ctxscope.daemon import start_daemon
from ctxscope.demo import count_model_requests, run_scenario, wait_for_analysis
from ctxscope.inspector.analyses.cache.verdicts import CacheJudgement, contradiction
from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.settings import DaemonConfig
from ctxscope.simulator.app import STATE_KEY, start_simulator
from ctxscope.vocab.kinds import CacheVerdict

DEMO_RUNS = (("anthropic", "claude-sonnet-4-5"), ("openai-chat", "gpt-4.1"), ("openai-responses", "gpt-4.1"))


def words(n: int, seed: str) -> str:
    """About 2n o200k tokens of text, distinct per seed."""
    return " ".join(f"{seed}{i % 97}" for i in range(n))


def expected_read(row: dict) -> int | None:
    """The predicted read in the provider's units, as the verdict compared it with the reported one."""
    cache = row.get("cache")
    return cache.get("expected_read") if isinstance(cache, dict) else None


def measure(rows: list[dict]) -> tuple[list[float], list[str]]:
    """(errors of the calls that read or were predicted to read, contradictions) of analysed calls."""
    errors, wrong = [], []
    for row in rows:
        cache, usage = row.get("cache"), row.get("usage")
        if not isinstance(cache, dict) or row.get("cache_verdict") is None:
            continue
        expected = expected_read(row) or 0
        judged = CacheJudgement(
            CacheVerdict(row["cache_verdict"]), cache.get("lost_tokens") or 0, None, None, None, None, None
        )
        why = contradiction(judged, usage, expected)
        if why:
            wrong.append(f"call {row['id']}: {why}")
        read = (usage or {}).get("cache_read") or 0
        if usage and (read or expected):
            errors.append(abs(expected - read) / max(expected, read))
    return errors, wrong


async def demo_run(api: str, model: str, tmp: Path) -> list[dict]:
    cfg = DaemonConfig(host="127.0.0.1", port=0, db=tmp / f"demo-{api}.db")
    daemon = await start_daemon(cfg)
    try:
        await daemon.sim.start()  # it starts on its first use
        sim = daemon.sim.control()  # the built-in simulator runs in the daemon's child process
        session = await run_scenario(daemon.url, sim, tmp / api, lambda line: None, api=api, model=model)
        sent = await asyncio.to_thread(count_model_requests, sim)
        stored = await asyncio.to_thread(wait_for_analysis, cfg.db, session, sent)
        if stored < sent:
            raise SystemExit(f"{api}: only {stored} of {sent} calls were analysed")
    finally:
        await daemon.stop()
    return read_rows(cfg.db, session)


def read_rows(path: Path, session: str | None = None) -> list[dict]:
    db = open_db(path)
    try:
        return list_calls(db, session=session, limit=None, newest_first=False)
    finally:
        db.conn.close()


# --- crafted edits ---------------------------------------------------------------------------

Case = Callable[[str, str], Awaitable[int]]  # (proxy URL, API key) -> calls sent


async def openai_edit_near_the_end(url: str, key: str, *, responses: bool, cut: int) -> int:
    client = openai.AsyncOpenAI(api_key=key, base_url=url + "/openai/v1", max_retries=0)
    try:
        doc = words(4500, "doc")
        edited = doc[:-cut] + " with one correction"
        for text in (doc, edited):
            # The document follows a shared first turn, so the two calls are one conversation and
            # the second is DIVERGED at the document (docs/architecture.md, "Sessions and threads").
            turns: list[Any] = [
                {"role": "user", "content": "Review this:"},
                {"role": "assistant", "content": "Send it."},
                {"role": "user", "content": text},
            ]
            if responses:
                await client.responses.create(model="gpt-4.1", instructions="Review the document.", input=turns)
            else:
                await client.chat.completions.create(
                    model="gpt-4.1", messages=[{"role": "system", "content": "Review the document."}, *turns]
                )
    finally:
        await client.close()
    return 2


def _cached(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


async def anthropic_older_entry(url: str, key: str) -> int:
    """Call 1 caches its long first message; call 2 moves the only marker to its last message; call 3
    replaces that last message: only call 1's entry is there to read."""
    client = anthropic.AsyncAnthropic(api_key=key, base_url=url + "/anthropic", max_retries=0)
    doc = words(4500, "doc")
    system: Any = "You are a careful reader."
    turns: list[Any] = [
        [{"role": "user", "content": _cached(doc)}],
        [
            {"role": "user", "content": doc},
            {"role": "assistant", "content": "Read it."},
            {"role": "user", "content": _cached("Summarise part one.")},
        ],
        [
            {"role": "user", "content": doc},
            {"role": "assistant", "content": "Read it."},
            {"role": "user", "content": _cached("Summarise part two.")},
        ],
    ]
    try:
        for messages in turns:
            await client.messages.create(model="claude-sim", max_tokens=256, system=system, messages=messages)
    finally:
        await client.close()
    return len(turns)


async def anthropic_write_below_the_table(url: str, key: str) -> int:
    """pi's shape: a ~1,400-token system prompt with a cache marker, then the conversation grows."""
    client = anthropic.AsyncAnthropic(api_key=key, base_url=url + "/anthropic", max_retries=0)
    system: Any = _cached(words(700, "pi"))
    messages: Any = [{"role": "user", "content": "hi"}]
    try:
        for turn in range(3):
            await client.messages.create(model="claude-sonnet-4-6", max_tokens=256, system=system, messages=messages)
            messages = messages + [
                {"role": "assistant", "content": f"Answer {turn}."},
                {"role": "user", "content": f"Next step {turn}."},
            ]
    finally:
        await client.close()
    return 3


CRAFTED: dict[str, Case] = {
    "chat: edit 40 chars before the end": lambda u, k: openai_edit_near_the_end(u, k, responses=False, cut=40),
    "chat: edit 2,000 chars before the end": lambda u, k: openai_edit_near_the_end(u, k, responses=False, cut=2000),
    "responses: edit 600 chars before the end": lambda u, k: openai_edit_near_the_end(u, k, responses=True, cut=600),
    "anthropic: read of an older call's entry": anthropic_older_entry,
    "anthropic: first write below the table's minimum": anthropic_write_below_the_table,
}


async def crafted_runs(tmp: Path) -> dict[str, list[dict]]:
    runner, sim_url = await start_simulator()
    runner.app[STATE_KEY].cache.minimums = {"sonnet-4-6": 1024}  # a provider below the published table
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp / "crafted.db",
        upstreams={"anthropic": sim_url, "openai": sim_url, "sim": sim_url},
    )
    daemon = await start_daemon(cfg)
    keys = {name: f"sk-bench-{i:02d}-0123456789abcdef" for i, name in enumerate(CRAFTED)}  # one scope per case
    by_case: dict[str, list[dict]] = {}
    try:
        sent = 0
        for name, case in CRAFTED.items():
            before = sent
            sent += await case(daemon.url, keys[name])
            rows = await asyncio.to_thread(wait_all_analysed, cfg.db, sent)
            by_case[name] = rows[before:sent]  # calls are sent one after another: capture order
    finally:
        await daemon.stop()
        await runner.cleanup()
    return by_case


def wait_all_analysed(path: Path, expected: int, timeout: float = 30.0) -> list[dict]:
    """Every stored call, once ``expected`` of them are stored and analysed."""
    deadline = time.monotonic() + timeout
    rows: list[dict] = []
    while time.monotonic() < deadline:
        rows = read_rows(path) if path.exists() else []
        if len(rows) >= expected and all(r.get("cache_verdict") for r in rows):
            return rows
        time.sleep(0.05)
    raise SystemExit(f"only {len(rows)} of {expected} crafted calls were stored and analysed")


def report(name: str, rows: list[dict]) -> tuple[list[float], list[str]]:
    errors, wrong = measure(rows)
    reads = [(expected_read(r) or 0, (r.get("usage") or {}).get("cache_read") or 0, r["cache_verdict"]) for r in rows]
    shown = ", ".join(f"{e:,}/{a:,} {v}" for e, a, v in reads[:6]) + (" ..." if len(reads) > 6 else "")
    mean = f"{statistics.mean(errors):.1%}" if errors else "-"
    print(f"{name}: {len(rows)} calls, mean error {mean}, contradictions {len(wrong)}")
    print(f"  predicted/read verdict: {shown}")
    scored = [(abs(e - a) / max(e, a), r) for (e, a, _), r in zip(reads, rows, strict=True) if e or a]
    if scored and max(scored, key=lambda x: x[0])[0] > 0:
        worst, row = max(scored, key=lambda x: x[0])
        print(
            f"  worst: call #{row['seq']} {row['relation']} ({row['cache'].get('reason')}), predicted "
            f"{expected_read(row):,}, read {(row.get('usage') or {}).get('cache_read') or 0:,}: {worst:.1%}"
        )
    for line in wrong[:5]:
        print(f"  CONTRADICTION {line}")
    return errors, wrong


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def main() -> int:
    logging.getLogger("ctxscope").setLevel(logging.WARNING)
    errors: list[float] = []
    wrong: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ctxscope-bench-") as tmp:
        os.environ["CTXSCOPE_HOME"] = str(Path(tmp) / "home")
        for api, model in DEMO_RUNS:
            e, w = report(f"demo session, {api}", await demo_run(api, model, Path(tmp)))
            errors += e
            wrong += w
        for name, rows in (await crafted_runs(Path(tmp))).items():
            e, w = report(name, rows)
            errors += e
            wrong += w
    median, p95 = (statistics.median(errors) if errors else 0.0), percentile(errors, 0.95)
    print(
        f"\nprediction error: median {median:.1%}, p95 {p95:.1%}; verdicts contradicting reported usage: {len(wrong)}"
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
