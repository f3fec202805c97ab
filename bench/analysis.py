#!/usr/bin/env python
"""What the per-call analysis costs: a synthetic 1,000-call agent session growing to ~100K tokens.

Each call re-sends the whole history plus 1–3 new messages (assistant text, a tool call and its
result, sometimes a user note), with Claude Code's moving cache marker. Every call goes through
the store's real ``ingest`` (blobs, deltas, row) in its own transaction, once without and once
with the analyzer, on fresh SQLite files, in one thread so the timings are the work itself.

Printed (CPU time of this process, so other work on the machine does not blur it): throughput of
store alone and of store + analysis; per call at about 10K/50K/100K tokens of context, the store's
milliseconds, the analysis's, the part of it spent canonicalising, and the tokens it counted
(only new segments: flat as the context grows), beside what canonicalising and counting the whole
prompt from scratch costs at that size. The last line gives the analysis's ms per call at each size.
On 2 shared cores it read about 0.6 / 0.8 / 1.05 ms at 10K / 50K / 100K (0.85 / 2.0 / 5.0 ms before
hashes, tool refs, token sums and segments were carried over from the previous call instead of
walked or copied whole); the rest of the growth is mostly memory traffic: the byte comparison of
the re-sent history with the previous body, and caches the store's parsing of a larger body evicts.

    .venv/bin/python bench/analysis.py            # ~1 minute on 2 cores
    .venv/bin/python bench/analysis.py --calls 300
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_exchanges import messages_exchange

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.pipeline import analyze as analyze_module
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.ingest import IngestState, ingest
from ctxscope.proxy.exchange import Exchange
from ctxscope.vocab.tokens import count_tokens

T0 = 1_760_000_000.0
clock = time.process_time  # CPU time of this process: other processes on the machine do not count
_WORDS = [
    "the",
    "parser",
    "reads",
    "each",
    "token",
    "and",
    "builds",
    "a",
    "tree",
    "of",
    "nodes",
    "while",
    "the",
    "checker",
    "walks",
    "it",
    "to",
    "find",
    "type",
    "errors",
    "in",
    "function",
    "calls",
    "loops",
    "and",
    "branches",
    "then",
    "reports",
    "them",
    "with",
    "line",
    "numbers",
]


class CountingCounter(TokenCounter):
    """A TokenCounter that adds up the tokens it actually had to count (cache misses)."""

    counted = 0

    def _count(self, seg):
        result = super()._count(seg)
        self.counted += result.total
        return result


def prose(rng: random.Random, tokens: int) -> str:
    words = [rng.choice(_WORDS) + (str(rng.randrange(100)) if rng.random() < 0.2 else "") for _ in range(tokens)]
    return " ".join(words)


def session_bodies(n: int, target_tokens: int, seed: int = 7) -> list[dict]:
    """Request bodies of one agent session whose context grows to about ``target_tokens``."""
    rng = random.Random(seed)
    per_message = max(10, int((target_tokens - 3000) / (n * 2.6)))  # ~2 messages a call, tool results longer
    system = [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": prose(rng, 2500), "cache_control": {"type": "ephemeral"}},
    ]
    tools = [{"name": f"tool_{i}", "description": prose(rng, 40), "input_schema": {"type": "object"}} for i in range(6)]
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": prose(rng, 60)}]}]
    bodies = []
    for i in range(n):
        for msg in messages:  # the marker moves: only the newest block carries it
            if isinstance(msg["content"], list):
                for block in msg["content"]:
                    block.pop("cache_control", None)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        bodies.append(
            {
                "model": "claude-sonnet-4-6",
                "max_tokens": 8192,
                "system": system,
                "tools": tools,
                "messages": messages,
                "stream": True,
            }
        )
        bodies[-1] = json.loads(json.dumps(bodies[-1]))  # a snapshot, as the wire would carry it
        for _ in range(rng.choice((1, 2, 2, 3)) if i else 0):
            if messages[-1]["role"] == "user":
                size = int(per_message * rng.uniform(0.5, 1.5))
                messages.append(
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": prose(rng, size // 4)},
                            {
                                "type": "tool_use",
                                "id": f"tu_{i}_{len(messages)}",
                                "name": "tool_1",
                                "input": {"path": "a.py"},
                            },
                        ],
                    }
                )
            else:
                size = int(per_message * rng.uniform(0.5, 1.5))
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": messages[-1]["content"][-1]["id"],
                                "content": prose(rng, size),
                            }
                        ],
                    }
                )
        if messages[-1]["role"] == "assistant":
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": messages[-1]["content"][-1]["id"],
                            "content": prose(rng, per_message),
                        }
                    ],
                }
            )
    return bodies


def exchange(i: int, raw: bytes) -> Exchange:
    usage = {
        "input_tokens": 50,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 100,
        "output_tokens": 30,
    }
    return messages_exchange(
        f"{i:016x}{i:06x}",
        raw,
        T0 + i * 5,
        usage=usage,
        content=[{"type": "text", "text": "ok"}],
        response_id=f"msg_{i}",
        model="claude-sonnet-4-6",
    )


def run(path: Path, exchanges: list[Exchange], analyzer: Analyzer | None) -> list[float]:
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    times = []
    for ex in exchanges:
        start = clock()
        db.execute("BEGIN IMMEDIATE")
        ingest(db, ex, state, [analyzer] if analyzer else ())
        db.execute("COMMIT")
        times.append(clock() - start)
    db.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=100_000, help="context size reached by the last call")
    args = ap.parse_args()

    print(f"building a {args.calls}-call session growing to ~{args.tokens // 1000}K tokens ...", flush=True)
    raws = [json.dumps(b).encode() for b in session_bodies(args.calls, args.tokens)]  # keep bytes, not objects
    exchanges = [exchange(i, r) for i, r in enumerate(raws)]
    count_tokens("warm up the encoder")
    gc.collect()

    counter = CountingCounter()
    analyzer = Analyzer(counter=counter)
    took, counted, canon, reused = timed(analyzer, counter)
    with tempfile.TemporaryDirectory() as tmp:
        plain = run(Path(tmp) / "store.db", exchanges, None)
        full = run(Path(tmp) / "analysed.db", exchanges, analyzer)
        db = store.connect(Path(tmp) / "analysed.db")
        context = [r[0] for r in db.execute("SELECT tokens_estimated FROM calls ORDER BY rowid")]
        relations = dict(db.execute("SELECT relation, COUNT(*) FROM calls GROUP BY 1").fetchall())
        db.close()

    n = len(exchanges)
    last = json.loads(raws[-1])
    print(f"\nrelations: {relations}; the last call: {context[-1]} tokens, {len(last['messages'])} messages")
    print(f"store only:        {n / sum(plain):7.1f} calls/s   ({sum(plain) / n * 1e3:.2f} ms/call)")
    print(f"store + analysis:  {n / sum(full):7.1f} calls/s   ({sum(full) / n * 1e3:.2f} ms/call)")
    print(
        f"\n{'context':>8} {'store ms':>9} {'analysis ms':>12} {'canonical ms':>13} {'tokens counted':>15} "
        f"{'full canonicalize ms':>21} {'full count ms':>14}"
    )
    figures = []
    for target in (10_000, 50_000, 100_000):
        window = [i for i, c in enumerate(context) if abs(c - target) <= target * 0.05][:40]
        if not window:
            continue
        figures.append(f"{med(took, window) * 1e3:.2f} ms at {context[window[0]] // 1000}K")
        body = json.loads(raws[window[0]])
        start = clock()
        whole = canonicalize("anthropic.messages", body)
        canon_full = (clock() - start) * 1e3
        start = clock()
        TokenCounter().count_prompt(whole)
        count_full = (clock() - start) * 1e3
        print(
            f"{context[window[0]] // 1000:>7}K {med(plain, window) * 1e3:9.2f} {med(took, window) * 1e3:12.2f} "
            f"{med(canon, window) * 1e3:13.2f} {med(counted, window):15.0f} {canon_full:21.1f} {count_full:14.1f}"
        )
    print(
        f"\ntokens counted per call: median {statistics.median(counted[1:]):.0f}, max {max(counted[1:])} "
        f"(the first call: {counted[0]})"
    )
    fresh = sum(len(json.loads(r)["messages"]) for r in raws) - sum(reused)
    print(f"messages reused from the previous call: {sum(reused)}; canonicalised afresh: {fresh}")
    print(f"analyzer memory: ~{analyzer.memory.bytes / 2**20:.1f} MB remembered; {len(counter._cache)} counts cached")
    print(f"\nanalysis per call (median CPU ms by context): {'; '.join(figures)}")


def med(values: list, window: list[int]) -> float:
    return statistics.median(values[i] for i in window)


def timed(analyzer: Analyzer, counter: CountingCounter) -> tuple[list[float], list[int], list[float], list[int]]:
    """Per call: seconds the analysis took, tokens it counted, seconds it spent canonicalising,
    messages it reused (lists filled as the analyzer runs)."""
    took: list[float] = []
    counted: list[int] = []
    canon: list[float] = []
    reused: list[int] = []
    analyze, prepare = analyzer.analyze, analyze_module.prepare

    def tracking_analyze(db, inp, live=True):
        before, start = counter.counted, clock()
        result = analyze(db, inp, live=live)
        took.append(clock() - start)
        counted.append(counter.counted - before)
        return result

    def tracking_prepare(*a):
        start = clock()
        result = prepare(*a)
        canon.append(clock() - start)
        reused.append(result[0].reused_items if result[0] is not None else 0)
        return result

    analyzer.analyze = tracking_analyze
    analyze_module.prepare = tracking_prepare
    return took, counted, canon, reused


if __name__ == "__main__":
    sys.exit(main())
