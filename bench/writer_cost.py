#!/usr/bin/env python
"""Writer CPU per call as the context grows: a call should cost about its new content, not its context.

Two Claude-Code-like sessions go through a real ``CaptureWriter`` in this process, with the
daemon's analyzers (the analysis, the search index, the replay link): one whose context sits
around 10K tokens, one around 370K. Both add the same kind of new content per call (an assistant
turn with a tool call, then its result, ~300 tokens), with Claude Code's moving cache marker,
and get a small JSON answer with usage. Each call is submitted alone and waited for (the writer
commits it), so a call's figure is the CPU of storing and analysing it: the writer thread's CPU
clock (``pthread_getcpuclockid``) and the whole process's ``process_time`` (the waiting main
thread costs next to nothing). The first calls of each session are left out (a cold session
parses and counts its whole history once). The sessions run ``--reps`` times in turn and each
keeps its least disturbed repetition (the lowest median): other work only ever adds CPU time.

    .venv/bin/python bench/writer_cost.py                 # ~30 s on 2 cores
    .venv/bin/python bench/writer_cost.py --calls 60 --profile

A third row stores the proxy bench's 1 MB uploads (``UPLOAD_REQ``: a 1 MB message, then a
numbered one), the writer's side of its CPU per MB.

The last line: ``writer CPU per call: 10K tokens X ms, 370K tokens Y ms (Z×)``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import itertools
import json
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "proxy_probe"))
from bench_exchanges import messages_exchange
from proxy_bench_wire import CHAT_PATH, UPLOAD_REQ

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.store import ingest as ingest_module
from ctxscope.inspector.writer.storing import work as work_module
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.proxy.exchange import Exchange
from ctxscope.vocab.tokens import count_tokens

T0 = 1_760_000_000.0
WARM_UP = 5  # calls of a session left out of its figure
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
    "to",
    "find",
    "type",
    "errors",
    "in",
    "function",
    "calls",
    "loops",
    "branches",
    "then",
    "reports",
    "them",
    "with",
    "line",
    "numbers",
]


def prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + (str(rng.randrange(100)) if rng.random() < 0.2 else "") for _ in range(words))


def _turn(rng: random.Random, n: int, words: int) -> tuple[list[dict], int]:
    """An assistant turn with a tool call, then the tool's result; and the tokens of its texts."""
    tool_id = f"toolu_{n:06d}"
    said, result = prose(rng, words // 6), prose(rng, words)
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": said},
                {"type": "tool_use", "id": tool_id, "name": "Read", "input": {"file_path": f"/src/m{n}.py"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result}]},
    ], count_tokens(said) + count_tokens(result) + 20


class Session:
    """A growing Claude-Code-like conversation; ``next_body`` is the next request's bytes."""

    def __init__(self, seed: int, context_tokens: int, new_words: int = 200):
        self.rng = random.Random(seed)
        self.new_words = new_words
        self.system = [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": prose(self.rng, 2000), "cache_control": {"type": "ephemeral"}},
        ]
        self.tools = [
            {
                "name": f"tool_{i}",
                "description": prose(self.rng, 60),
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
            for i in range(12)
        ]
        self.messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": prose(self.rng, 80)}]}]
        self.n = 0
        self.tokens = sum(count_tokens(b["text"]) for b in self.system + self.messages[0]["content"]) + sum(
            count_tokens(json.dumps(t)) for t in self.tools
        )
        while self.tokens < context_tokens:  # the history before the first call: turns of ~600 words
            turn, tokens = _turn(self.rng, self._next(), 600)
            self.messages += turn
            self.tokens += tokens

    def _next(self) -> int:
        self.n += 1
        return self.n

    def next_body(self) -> bytes:
        for msg in self.messages:  # Claude Code's marker moves to the newest block
            for block in msg["content"]:
                block.pop("cache_control", None)
        self.messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        # Claude Code's order: the messages before the system prompt and the tools.
        body = {
            "model": "claude-sonnet-4-5",
            "messages": self.messages,
            "temperature": 1,
            "system": self.system,
            "tools": self.tools,
            "metadata": {"user_id": "bench"},
            "max_tokens": 32000,
            "stream": False,
        }
        raw = json.dumps(body).encode()
        turn, tokens = _turn(self.rng, self._next(), self.new_words)
        self.messages += turn
        self.tokens += tokens
        return raw


class Uploads:
    """The proxy bench's 1 MB OpenAI chat uploads: one 1 MB message, then a numbered one."""

    def __init__(self) -> None:
        self.n = 0

    def next_body(self) -> bytes:
        self.n += 1
        return UPLOAD_REQ % self.n


def upload_exchange(session: str, i: int, raw: bytes) -> Exchange:
    response = {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
    }
    t = T0 + i * 5
    return Exchange(
        id=f"{session}{i:020x}",
        provider="openai",
        upstream="http://127.0.0.1:1",
        method="POST",
        path=CHAT_PATH,
        query="",
        session_label=None,
        annotations=(),
        request_headers=(("content-type", "application/json"),),
        key_fingerprint="e" * 16,
        request_body=raw,
        status=200,
        response_headers=(("content-type", "application/json"),),
        response_body=json.dumps(response).encode(),
        started_at=t,
        first_byte_at=t + 0.01,
        ended_at=t + 0.02,
        outcome="ok",
        client="bench/1.0",
    )


def exchange(session: str, i: int, raw: bytes) -> Exchange:
    usage = {
        "input_tokens": 40,
        "cache_read_input_tokens": 9000,
        "cache_creation_input_tokens": 400,
        "output_tokens": 120,
    }
    return messages_exchange(
        f"{session}{i:020x}",
        raw,
        T0 + i * 5,
        usage=usage,
        content=[{"type": "text", "text": "Reading the file."}],
        response_id=f"msg_{session}_{i}",
        session=session,
        client="claude-cli/2.0 (bench)",
        user_agent="claude-cli/2.0 (bench)",
    )


class Timed:
    """An analyzer (or the store's ``store_body``) wrapped to add up its writer-thread CPU."""

    def __init__(self, inner: Callable, spent: dict[str, float], name: str = ""):
        self.inner, self.spent = inner, spent
        self.name = name or type(inner).__name__
        self.single_write = getattr(inner, "single_write", False)
        if hasattr(inner, "row_columns"):  # the analysis runs before the call's INSERT: time it there
            self.row_columns = Timed(inner.row_columns, spent, self.name)

    def __call__(self, *args):
        start = time.thread_time()
        try:
            return self.inner(*args)
        finally:
            self.spent[self.name] += time.thread_time() - start


def run_session(
    writer: CaptureWriter,
    stored: threading.Event,
    name: str,
    session: Session | Uploads,
    calls: int,
    spent: dict[str, float],
    make: Callable[[str, int, bytes], Exchange] = exchange,
) -> tuple[list[float], list[float], dict[str, float], int]:
    """Per warm call: writer-thread CPU ms and process CPU ms; analyzer ms per call; the last body's size."""
    clock = time.pthread_getcpuclockid(writer._thread.ident)
    thread_ms, process_ms = [], []
    size = 0
    for i in range(calls):
        raw = session.next_body()
        size = len(raw)
        ex = make(name, i, raw)
        if i == WARM_UP:
            spent.clear()
        gc.collect()
        stored.clear()
        t0, p0 = time.clock_gettime(clock), time.process_time()
        writer.submit(ex)
        if not stored.wait(120):
            raise SystemExit("the writer did not store a call within 120 s")
        t1, p1 = time.clock_gettime(clock), time.process_time()
        if i >= WARM_UP:
            thread_ms.append((t1 - t0) * 1e3)
            process_ms.append((p1 - p0) * 1e3)
    per_call = {k: v * 1e3 / max(1, calls - WARM_UP) for k, v in spent.items()}
    return thread_ms, process_ms, per_call, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40, help="calls per session (the first 5 are left out)")
    ap.add_argument("--small", type=int, default=10_000, help="context tokens of the small session")
    ap.add_argument("--large", type=int, default=370_000, help="context tokens of the large session")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the three sessions (the best is kept)")
    ap.add_argument("--profile", action="store_true", help="cProfile the writer thread's ingest")
    args = ap.parse_args()
    count_tokens("warm up the encoder")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        spent: dict[str, float] = defaultdict(float)
        analyzers = [Timed(a, spent) for a in writer_analyzers()]
        ingest_module.store_body = Timed(ingest_module.store_body, spent, "blob store")
        writer = CaptureWriter(Path(tmp) / "capture.db", analyzers=analyzers, status_file=False, keep_unstored=False)
        stored = threading.Event()
        writer.on_stored = stored.set
        writer.start()
        profiler = cProfile.Profile() if args.profile else None
        try:
            if profiler is not None:
                work_module.ingest = profiled(work_module.ingest, profiler)  # store_one calls it from there
            runs = [("small", args.small), ("large", args.large), ("upload", 0)]
            for rep, (label, tokens) in itertools.product(range(args.reps), runs):
                session = Session(rep, tokens - args.calls * 150) if tokens else Uploads()  # the target mid-window
                make = exchange if tokens else upload_exchange
                name = f"s{label}{rep}"
                got = (
                    *run_session(writer, stored, name, session, args.calls, spent, make),
                    _context(Path(tmp) / "capture.db", name),
                )
                # The least disturbed repetition: other work on the machine only ever adds CPU time.
                if label not in results or statistics.median(got[1]) < statistics.median(results[label][1]):
                    results[label] = got
        finally:
            writer.stop()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
    print(f"\n{'session':>8} {'context':>9} {'body':>9} {'thread ms':>10} {'process ms':>11}  ms per part")
    figures = {}
    for label, (thread_ms, process_ms, per_call, size, context) in results.items():
        med_t, med_p = statistics.median(thread_ms), statistics.median(process_ms)
        figures[label] = (context, med_p)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_call.items()))
        shown = f"{context // 1000}K" if label != "upload" else "-"
        print(f"{label:>8} {shown:>9} {size / 2**20:>7.2f}MB {med_t:>10.2f} {med_p:>11.2f}  {parts}")
    print(f"1 MB upload (bench/proxy_overhead.py's upload phase): writer CPU {figures['upload'][1]:.2f} ms per call")
    (c1, small), (c2, large) = figures["small"], figures["large"]
    print(
        f"writer CPU per call: {c1 // 1000}K tokens {small:.2f} ms, {c2 // 1000}K tokens {large:.2f} ms "
        f"({large / small:.1f}×)"
    )
    return 0


def profiled(ingest: Callable, profiler: cProfile.Profile) -> Callable:
    """``ingest`` under the profiler (it runs in the writer thread)."""

    def run(*a, **kw):
        profiler.enable()
        try:
            return ingest(*a, **kw)
        finally:
            profiler.disable()

    return run


def _context(path: Path, session: str) -> int:
    """The analysis's token estimate of the session's middle call (of the uploads: the model's
    messages are not an agent's context, and they are counted all the same)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        found = [
            r[0] or 0
            for r in conn.execute("SELECT tokens_estimated FROM calls WHERE session = ? ORDER BY seq", [session])
        ]
        return int(statistics.median(found[WARM_UP:])) if found[WARM_UP:] else 0
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
