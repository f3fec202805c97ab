"""A big HAR written an entry at a time (never held whole): foreign entries, each a distinct
Anthropic request of ``body_bytes`` of text, for the import's memory tests. The text is random words
(a slice of one pool, starting where the entry's number says): the store counts every prompt's
tokens, and random base64 costs the tokenizer six times as much CPU per byte."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

WORDS = [
    "read",
    "the",
    "file",
    "then",
    "write",
    "a",
    "test",
    "for",
    "each",
    "tool",
    "call",
    "and",
    "its",
    "result",
    "in",
    "one",
    "short",
    "answer",
]


@functools.cache
def _pool() -> str:
    rng = random.Random(41)
    return " ".join(rng.choice(WORDS) for _ in range(250_000))  # ~1.2 MB


def _text(n: int, size: int) -> str:
    pool = _pool()
    start = n * 7919 % len(pool)
    head = f"call {n}: "
    body = pool[start:] + pool * (size // len(pool) + 1)
    return head + body[: max(0, size - len(head))]


def entry(n: int, body_bytes: int) -> dict:
    text = _text(n, body_bytes)
    request = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": text}]}
    return {
        "startedDateTime": f"2026-01-02T03:{n // 3600 % 60:02d}:{n // 60 % 60:02d}.{n % 60:03d}Z",
        "time": 10,
        "timings": {"wait": 5},
        "request": {
            "method": "POST",
            "url": "https://api.anthropic.com/v1/messages",
            "headers": [{"name": "content-type", "value": "application/json"}],
            "postData": {"mimeType": "application/json", "text": json.dumps(request)},
        },
        "response": {"status": 200, "headers": [], "content": {"text": '{"type":"message","content":[]}'}},
    }


def write_big_har(path: Path, entries: int, body_bytes: int) -> int:
    """Write the HAR; its size in bytes."""
    with path.open("w", encoding="utf-8") as f:
        f.write('{"log": {"version": "1.2", "entries": [\n')
        for n in range(entries):
            f.write(("," if n else "") + json.dumps(entry(n, body_bytes)) + "\n")
        f.write('], "creator": {"name": "big", "version": "1"}}}\n')
    return path.stat().st_size
