#!/usr/bin/env python
"""What ``ctxscope advise`` costs on a 1,000-call agent session with every content cause: a
timestamp in the system prompt that changes every call, the tools reordered once half-way,
6-minute gaps on a 5-minute TTL every tenth call; the context grows by a tool round a call
(to ~60K tokens). Stored through the writer's ingest with the daemon's analyzers.

Printed: the installed ``ctxscope advise SESSION --json`` under ``/usr/bin/time -v`` (wall, CPU,
peak RSS), from the stored prompt shapes; ``--keep`` the store, to time the advice from the bodies
(``load_session`` + ``advise``, the reference ``tests/inspector/test_advice_stored.py`` compares with).

``--big TOKENS``: instead, one session of ``--calls`` calls growing to a TOKENS-token prompt
(``scale_build.Conversation``, the scale bench's big session, with the turn size that reaches
TOKENS in that many calls), and ``advise`` timed at its end.

    .venv/bin/python bench/advise_scale.py               # ~2 minutes on 2 cores
    .venv/bin/python bench/advise_scale.py --calls 300 --keep /tmp/s.db
    .venv/bin/python bench/advise_scale.py --calls 300 --big 1000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from bench_exchanges import messages_exchange  # noqa: E402
from findings import CTXSCOPE, measured  # noqa: E402

from ctxscope.inspector.pipeline.search_index import writer_analyzers  # noqa: E402
from ctxscope.inspector.store import db as store  # noqa: E402
from ctxscope.inspector.store.ingest import IngestState, ingest  # noqa: E402
from ctxscope.proxy.exchange import Exchange  # noqa: E402

T0 = 1_760_000_000.0
TOOLS = ("Read", "Edit", "Bash", "Grep", "Glob", "Write")


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _stamp(i: int) -> str:
    return f"2026-12-01T{10 + i // 60 % 12:02d}:{i % 60:02d}:00Z"


def bodies(calls: int, result_words: int = 40) -> list[tuple[float, bytes]]:
    """(start time, request body) of each call: Anthropic Messages, every cause at once."""
    out: list[tuple[float, bytes]] = []
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}]
    t = T0
    for i in range(calls):
        names = list(reversed(TOOLS)) if i >= calls // 2 else list(TOOLS)
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [
                {
                    "type": "text",
                    "text": f"Current time: {_stamp(i)}. You are a coding agent.",
                },
                {"type": "text", "text": words(2200, "policy"), "cache_control": {"type": "ephemeral"}},
            ],
            "tools": [{"name": n, "description": words(180, n), "input_schema": {"type": "object"}} for n in names],
            "messages": messages,
        }
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        out.append((t, json.dumps(body).encode()))
        messages[-1]["content"][-1].pop("cache_control")
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"tu_{i}", "name": "Read", "input": {"path": f"f{i}.py"}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"tu_{i}", "content": words(result_words, f"l{i}x")}
                ],
            }
        )
        t += 360.0 if i % 10 == 9 else 20.0
    return out


def exchange(i: int, t: float, raw: bytes, upstream: str = "https://api.anthropic.com") -> Exchange:
    return messages_exchange(
        f"{int(t) * 1000:016x}{i:06x}",
        raw,
        t,
        usage={"input_tokens": 10, "output_tokens": 3},
        content=[{"type": "tool_use", "id": f"tu_{i}", "name": "Read", "input": {}}],
        response_id=f"msg_{i}",
        session="advise-scale",
        upstream=upstream,
    )


def big_bodies(calls: int, tokens: int, *, billing: bool = False) -> Iterator[tuple[float, bytes]]:
    """(start time, request body) of ``calls`` calls of the scale bench's big session, the last
    prompt about ``tokens`` tokens (o200k reads about 5.4 characters a token of this JSON);
    ``billing``: with Claude Code's billing header, a new one each call, as system[0]."""
    from scale_build import Conversation, _pool

    start_words = 15_000
    chars = tokens * 5.4 - start_words * 7
    new_words = max(50, int(chars / max(1, calls) / 7.2))  # a turn: its words, a sixth of them again as text
    conv = Conversation(
        10_000_000, _pool(), history_words=start_words, new_words=new_words, dated=False, compact_every=0
    )
    for i in range(calls):
        raw = conv.next_body(i, 1 << 30)
        if billing:
            header = (
                f"x-anthropic-billing-header: cc_version=2.1.{i}.c4f; cc_entrypoint=cli; cch={i * 7919 % 65536:05x};"
            )
            raw = raw.replace(
                b'"system": [', b'"system": [' + json.dumps({"type": "text", "text": header}).encode() + b", ", 1
            )
        yield T0 + 20.0 * i, raw


GATEWAY = "https://llm-gateway.example.com"  # an upstream that caches Claude Code's billing header as text


def build(path: Path, calls: int, big: int = 0, *, billing: bool = False) -> str:
    """Store the session through the writer's ingest; its id. ``billing``: the big session with a
    billing header, sent to a third-party upstream (``big_bodies``)."""
    analyzers = writer_analyzers()
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    made = big_bodies(calls, big, billing=billing) if big else iter(bodies(calls))
    upstream = GATEWAY if billing else "https://api.anthropic.com"
    for i, (t, raw) in enumerate(made):
        db.execute("BEGIN IMMEDIATE")
        ingest(db, exchange(i, t, raw, upstream), state, analyzers)
        db.execute("COMMIT")
    session = db.execute("SELECT session FROM calls LIMIT 1").fetchone()[0]
    db.close()
    return session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--keep", type=Path, help="also copy the store here")
    ap.add_argument("--big", type=int, default=0, help="one session growing to a prompt of this many tokens")
    ap.add_argument("--billing", action="store_true", help="--big with a billing header to a third-party upstream")
    ap.add_argument("--db", type=Path, help="time a store built before (with --keep) instead of building one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "c.db"
        if args.db:
            db = store.connect(path)
            session = db.execute("SELECT session FROM calls LIMIT 1").fetchone()[0]
            db.close()
        else:
            session = build(path, args.calls, args.big, billing=args.billing)
        if args.keep:
            shutil.copy(path, args.keep)
        db = store.connect(path)
        n, top_tokens = db.execute("SELECT count(*), max(tokens_estimated) FROM calls").fetchone()
        db.close()
        print(
            f"{n} calls stored ({path.stat().st_size / 2**20:.0f} MB), the largest prompt {top_tokens:,} tokens,"
            f" session {session}"
        )
        wall, cpu, rss, out = measured([str(CTXSCOPE), "advise", session, "--db", str(path), "--json"])
        top = json.loads(out)["advices"][:3]
        print(f"ctxscope advise: {wall:6.2f} s wall {cpu:6.2f} s CPU {rss:5.0f} MB peak")
        for a in top:
            print(f"  {a['cause']:<14} {a['pointer']!s:<12} ${a['saving_usd']:.4f} {a['saving_pct']:.1f}%")


if __name__ == "__main__":
    main()
