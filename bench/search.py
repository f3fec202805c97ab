#!/usr/bin/env python
"""The search index on a 1,000-call agent session: its size as a share of the store, and query time.

A synthetic session re-sends its whole history on every call plus 1–3 new messages (assistant
text, a tool call and its result, sometimes a user note), as an agent does. Every call goes
through the store's real ``ingest`` with the daemon's analyzers (the analysis, then the search
index) in its own transaction, on a fresh SQLite file.

Printed: the store's size and the index's (SQLite's dbstat pages of the search tables: distinct
segments, occurrences, the FTS5 index), the share of the store it takes, and what indexing every
call's whole prompt would have held (calls x context); then the median and 95th percentile time of
a query for a word found once (a unique tool output), a word in most segments, and a word found
nowhere, each through ``store/search.py``'s ``search`` with its 50-hit limit.

    .venv/bin/python bench/search.py              # ~1 minute on 2 cores
    .venv/bin/python bench/search.py --calls 300
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from ctxscope.inspector.pipeline.search_index import SearchIndexer, writer_analyzers
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.derived.search import index_stats, search
from ctxscope.inspector.store.ingest import IngestState, ingest
from ctxscope.proxy.exchange import Exchange

T0 = 1_760_000_000.0
WORDS = [
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
    "checker",
    "walks",
    "it",
    "reports",
    "every",
    "mismatch",
    "finds",
    "in",
    "input",
    "files",
    "project",
]
UNIQUE = "zebra-quasar-7731"


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def session(calls: int, seed: int = 7) -> list[Exchange]:
    rng = random.Random(seed)
    system = [{"type": "text", "text": "You are a coding agent. " + _text(rng, 800)}]
    tools = [
        {"name": f"tool_{i}", "description": _text(rng, 60), "input_schema": {"type": "object"}} for i in range(12)
    ]
    messages: list = [{"role": "user", "content": "fix the failing test " + _text(rng, 40)}]
    out = []
    for i in range(calls):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "system": system,
            "tools": tools,
            "messages": messages,
        }
        answer = _text(rng, rng.randint(20, 80))
        response = {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 50, "cache_read_input_tokens": 1000},
        }
        t = T0 + i * 5.0
        out.append(
            Exchange(
                id=f"{int(t * 1e6):016x}{i:06x}",
                provider="anthropic",
                upstream="https://api.anthropic.com",
                method="POST",
                path="/v1/messages",
                query="",
                session_label="bench",
                annotations=(),
                request_headers=(("content-type", "application/json"),),
                key_fingerprint=None,
                request_body=json.dumps(body).encode(),
                status=200,
                response_headers=(("content-type", "application/json"),),
                response_body=json.dumps(response).encode(),
                started_at=t,
                first_byte_at=t + 0.5,
                ended_at=t + 1.0,
                outcome="ok",
            )
        )
        tool_output = _text(rng, rng.randint(50, 400)) + (f" {UNIQUE}" if i == calls // 2 else "")
        messages = messages + [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": answer},
                    {"type": "tool_use", "id": f"t{i}", "name": "tool_1", "input": {"n": i}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": tool_output}]},
        ]
        if rng.random() < 0.1:
            messages.append({"role": "user", "content": _text(rng, 30)})
            messages.append({"role": "assistant", "content": "ok"})
    return out


def _timed(db, text: str, repeat: int) -> tuple[float, float, int]:
    times, hits = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        hits = len(search(db, text))
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1], hits


def store_all(path: Path, exchanges: list[Exchange], analyzers: list) -> tuple[object, float]:
    """The calls stored through ``ingest`` with ``analyzers``, one transaction each; (db, CPU seconds)."""
    db = store.connect(path)
    state = IngestState(store.next_capture_epoch(db))
    t = time.process_time()
    for ex in exchanges:
        store.begin(db)
        ingest(db, ex, state, analyzers)
        store.commit(db)
    return db, time.process_time() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    exchanges = session(args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        analysis_only = [a for a in writer_analyzers() if not isinstance(a, SearchIndexer)]
        plain, plain_s = store_all(Path(tmp) / "plain.db", exchanges, analysis_only)
        plain.close()
        db, stored_s = store_all(Path(tmp) / "bench.db", exchanges, writer_analyzers())
        context = sum(len(ex.request_body) for ex in exchanges)
        stats = index_stats(db, text_bytes=True)
        print(
            f"{args.calls} calls stored and analysed: {plain_s:.1f} s CPU without the search index, {stored_s:.1f} s "
            f"with it ({(stored_s - plain_s) / args.calls * 1000:.2f} ms per call); request bytes over all calls "
            f"(calls x context): {context / 2**20:.1f} MiB"
        )
        print(
            f"store {stats['store_bytes'] / 2**20:.2f} MiB, search index {stats['index_bytes'] / 2**20:.2f} MiB "
            f"= {stats['index_bytes'] / stats['store_bytes']:.1%} of the store "
            f"({stats['segments']} distinct segments, {stats['occurrences']} occurrences, "
            f"{stats['text_bytes'] / 2**20:.2f} MiB of text; "
            f"{stats['index_bytes'] / context:.2%} of calls x context)"
        )
        for label, text in (("found once", UNIQUE), ("in most segments", "parser"), ("found nowhere", "xylophone")):
            median, p95, hits = _timed(db, text, args.repeat)
            print(f"query {label:<17} {text!r:<22} median {median:.2f} ms, p95 {p95:.2f} ms, {hits} hit(s)")
        db.close()


if __name__ == "__main__":
    main()
