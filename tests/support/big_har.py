"""A big HAR written an entry at a time (never held whole): foreign entries, each a distinct
Anthropic request of ``body_bytes`` random text, for the import's memory tests."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path


def entry(n: int, body_bytes: int) -> dict:
    text = base64.b64encode(os.urandom(body_bytes * 3 // 4)).decode()
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
