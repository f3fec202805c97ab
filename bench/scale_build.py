"""The scale bench's store: many agent sessions stored through the writer's ingest, built once and kept.

The store is what the daemon's writer child would have stored: a ``CaptureWriter`` with the
daemon's analyzers (the same ``store_one``/``ingest`` path, in batches of up to MAX_BATCH calls a
transaction). One SQLite file takes one writer at a time, and a batch holds the write lock while
it parses and analyses, so several ingest processes on one store would take turns, not overlap:
the build runs ONE writer and moves everything else off its core instead. The request bodies are
generated in a child process and handed over through a bounded queue, so on 2 cores the writer
thread has one to itself; the bodies are JSON-encoded message by message (a call re-encodes only
its new messages and the one that lost the cache marker), so a 4 MB body costs a join, not a
``json.dumps`` of the whole conversation.

Sessions are Claude-Code-like: a ~2,600-token system prompt with a cache marker, 12 tools, and a
conversation that grows each call by an assistant turn with a tool call and its result (a few KB),
the marker moving to the newest block. Breaks, as real agents make them: one session in three
has a date in its system prompt that changes once halfway, and a long session is compacted every
COMPACT_EVERY calls (the history replaced by a summary and the last turns).

A built store is kept under ``--store DIR`` in a file named by its parameters, with a ``.done``
file written after the build completed, so a rerun with the same size skips the build and a build
that was interrupted is started again.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import random
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench_exchanges import messages_exchange

from ctxscope.proxy.exchange import Exchange

T0 = 1_780_000_000.0
COMPACT_EVERY = 150  # calls between two compactions of a long session
POOL_WORDS = [
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
    "branches",
    "then",
    "reports",
    "them",
    "with",
    "line",
    "numbers",
    "module",
    "cache",
    "path",
    "test",
    "branch",
    "review",
    "import",
    "return",
    "value",
    "list",
    "dict",
    "string",
    "bytes",
    "offset",
    "index",
    "buffer",
    "stream",
    "handler",
    "request",
    "response",
]


@dataclass(frozen=True)
class Size:
    """What to build: ``calls`` in ``sessions`` (the first, the long one, of ``long_calls``), plus
    one session growing until its prompt reaches ``big_tokens``."""

    calls: int
    sessions: int
    long_calls: int
    big_tokens: int

    @property
    def name(self) -> str:
        return f"scale-c{self.calls}-s{self.sessions}-l{self.long_calls}-b{self.big_tokens}"

    def session_calls(self) -> list[int]:
        """Calls per session: the long one first, the rest shared out evenly."""
        if self.sessions <= 1:
            return [self.calls]
        long = min(self.long_calls, self.calls - (self.sessions - 1))
        rest, extra = divmod(self.calls - long, self.sessions - 1)
        return [long] + [rest + (1 if s <= extra else 0) for s in range(1, self.sessions)]


LONG = "scale00000"  # the long session
TYPICAL = "scale00001"  # a session of about calls/sessions calls
BIG = "scalebig"  # the session growing to big_tokens


class Conversation:
    """A growing agent conversation; ``next_body`` returns the next request's bytes."""

    def __init__(self, seed: int, pool: str, *, history_words: int, new_words: int, dated: bool, compact_every: int):
        self.rng = random.Random(seed)
        self.compact_every = compact_every
        self.pool = pool
        self.new_words = new_words
        self.dated = dated
        self.n = 0
        system_text = self.prose(2000)
        self.tools = json.dumps(
            [
                {
                    "name": f"tool_{i}",
                    "description": self.prose(60),
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                }
                for i in range(12)
            ]
        )
        self.system_text = system_text
        self.messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": self.prose(80)}]}]
        for _ in range(history_words // 700):
            self.messages += self.turn(600)
        self.encoded = [json.dumps(m) for m in self.messages]

    def prose(self, words: int) -> str:
        """``words`` words of the pool from a random place (about 6 characters a word)."""
        start = self.rng.randrange(len(self.pool) - words * 8)
        start = self.pool.index(" ", start) + 1
        return self.pool[start : start + words * 6].rsplit(" ", 1)[0]

    def turn(self, words: int) -> list[dict]:
        self.n += 1
        tool_id = f"toolu_{self.n:06d}"
        return [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": self.prose(words // 6)},
                    {"type": "tool_use", "id": tool_id, "name": "Read", "input": {"file_path": f"/src/m{self.n}.py"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": self.prose(words)}],
            },
        ]

    def compact(self) -> None:
        """The agent's compaction: a summary and the last two turns."""
        summary = {
            "role": "user",
            "content": [{"type": "text", "text": "Summary of the work so far: " + self.prose(400)}],
        }
        self.messages = [summary, *self.messages[-4:]]
        self.encoded = [json.dumps(m) for m in self.messages]

    def next_body(self, call: int, calls: int) -> bytes:
        if call and self.compact_every and call % self.compact_every == 0:
            self.compact()
        last = self.messages[-1]["content"][-1]
        last["cache_control"] = {"type": "ephemeral"}
        self.encoded[-1] = json.dumps(self.messages[-1])
        date = "2026-12-03" if not self.dated or call < calls // 2 else "2026-12-04"
        system = [
            {"type": "text", "text": f"You are a coding agent. Today is {date}."},
            {"type": "text", "text": self.system_text, "cache_control": {"type": "ephemeral"}},
        ]
        raw = (
            '{"model": "claude-sonnet-4-5", "messages": ['
            + ", ".join(self.encoded)
            + '], "temperature": 1, "system": '
            + json.dumps(system)
            + ', "tools": '
            + self.tools
            + ', "metadata": {"user_id": "bench"}, "max_tokens": 32000, "stream": false}'
        ).encode()
        del last["cache_control"]
        self.encoded[-1] = json.dumps(self.messages[-1])
        new = self.turn(self.new_words)
        self.messages += new
        self.encoded += [json.dumps(m) for m in new]
        return raw


def _pool(seed: int = 41) -> str:
    rng = random.Random(seed)
    return " ".join(
        rng.choice(POOL_WORDS) + (str(rng.randrange(100)) if rng.random() < 0.2 else "") for _ in range(400_000)
    )


Item = tuple[str, int, bytes]  # session, call number, request body


def _generate(size: Size, chars_per_token: float, out: multiprocessing.Queue) -> None:
    """The generator process: every session's bodies, in batches of about 4 MB, then None."""
    pool = _pool()
    batch: list[Item] = []
    held = 0

    def put(item: Item) -> None:
        nonlocal held, batch
        batch.append(item)
        held += len(item[2])
        if held >= 4 << 20 or len(batch) >= 64:
            out.put(batch)
            batch, held = [], 0

    for s, n in enumerate(size.session_calls()):
        conv = Conversation(s, pool, history_words=2000, new_words=300, dated=s % 3 == 1, compact_every=COMPACT_EVERY)
        for i in range(n):
            put((f"scale{s:05d}", i, conv.next_body(i, n)))
    if size.big_tokens:
        conv = Conversation(10_000_000, pool, history_words=15_000, new_words=800, dated=False, compact_every=0)
        i = 0
        while True:
            body = conv.next_body(i, 1 << 30)
            put((BIG, i, body))
            i += 1
            if len(body) / chars_per_token >= size.big_tokens:
                break
    if batch:
        out.put(batch)
    out.put(None)


def exchange(session: str, s: int, i: int, raw: bytes, previous: int) -> Exchange:
    """The call as the proxy hands it to the writer: the request, a small answer with usage that
    says the previous prompt was read from the cache, times 20 s apart, sessions an hour apart."""
    prompt = len(raw) // 4
    cached = min(previous // 4, prompt)
    usage = {
        "input_tokens": 40,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": max(0, prompt - cached - 40),
        "output_tokens": 120,
    }
    return messages_exchange(
        f"{session}{i:020x}",
        raw,
        T0 + s * 3600 + i * 20,
        usage=usage,
        content=[{"type": "text", "text": "Reading the file."}],
        response_id=f"msg_{session}_{i}",
        session=session,
        client="claude-cli/2.0 (bench)",
        user_agent="claude-cli/2.0 (bench)",
    )


def _chars_per_token() -> float:
    from ctxscope.vocab.tokens import count_tokens

    sample = _pool()[:200_000]
    return len(json.dumps(sample)) / count_tokens(sample)


def _items(size: Size) -> Iterator[list[Item]]:
    out: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue(maxsize=8)
    gen = multiprocessing.get_context("spawn").Process(
        target=_generate, args=(size, _chars_per_token(), out), daemon=True
    )
    gen.start()
    try:
        while True:
            try:
                batch = out.get(timeout=5)
            except queue.Empty:
                if not gen.is_alive():
                    raise SystemExit(f"the body generator died (exit code {gen.exitcode})") from None
                continue
            if batch is None:
                return
            yield batch
    finally:
        gen.kill()
        gen.join()


def build(db: Path, size: Size) -> str:
    """Store ``size`` in ``db`` through a ``CaptureWriter``; returns a line saying what was built."""
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.writer.storing.thread import CaptureWriter

    writer = CaptureWriter(db, analyzers=writer_analyzers(), status_file=False, keep_unstored=False)
    writer.start()
    began, cpu = time.monotonic(), time.process_time()
    submitted, sent_bytes, previous = 0, 0, 0
    step = max(1, (size.calls + 700) // 10)
    try:
        for batch in _items(size):
            for session, i, raw in batch:
                s = int(session[5:]) if session != BIG else size.sessions
                writer.submit(exchange(session, s, i, raw, previous if i else 0))
                previous = len(raw)
                submitted += 1
                sent_bytes += len(raw)
                if submitted % step == 0:
                    took = time.monotonic() - began
                    print(
                        f"  submitted {submitted:,} calls, {writer.stats().written:,} stored ({took:.0f} s)", flush=True
                    )
            while writer.stats().queued > 1000 or writer.stats().queued_bytes > 64 << 20:
                time.sleep(0.02)
        while writer.stats().queued:
            time.sleep(0.1)
    finally:
        writer.stop(timeout=600)
    took, cpu = time.monotonic() - began, time.process_time() - cpu
    with sqlite3.connect(db) as conn:
        stored = conn.execute("select count(*) from calls").fetchone()[0]
        big = conn.execute("select count(*), max(tokens_estimated) from calls where session = ?", (BIG,)).fetchone()
    line = (
        f"store: {stored:,} calls ({size.calls:,} in {size.sessions:,} sessions, the longest"
        f" {size.session_calls()[0]:,}; and {big[0]:,} calls growing to a {big[1] or 0:,}-token prompt)"
        f" from {sent_bytes / 2**30:.2f} GB of requests,"
        f" built in {took:.0f} s ({stored / max(took, 1e-9):.0f} calls/s, {cpu:.0f} s CPU in the ingest process);"
        f" {db.stat().st_size / 2**20:.0f} MB"
    )
    print(line, flush=True)
    return line


def stored_store(directory: Path, size: Size) -> tuple[Path, str]:
    """The store of ``size`` under ``directory``, built unless a complete one is there."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"{size.name}.db"
    done = directory / f"{size.name}.done"
    if done.exists() and db.exists():
        line = done.read_text().strip()
        print(f"reusing {db}: {line}", flush=True)
        return db, line
    for stale in directory.glob(f"{size.name}.db*"):
        stale.unlink()
    line = build(db, size)
    done.write_text(line + "\n")
    return db, line
