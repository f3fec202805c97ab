"""Test data the test modules share: captured exchanges, provider bodies, stores filled through the
real writer, planted spool files. Each test then states only what matters to it.

No test module imports another (docs/architecture.md, "Test data comes from factories").
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import struct
import time
from pathlib import Path
from typing import Any

from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.store import queries
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.proxy.exchange import Exchange

_ids = itertools.count(1)
T0 = 1_760_000_000.0  # the clock of exchange_at: calls at T0 + t seconds


def make_exchange(
    n: int | None = None, *, request: dict | None = None, response: dict | None = None, **overrides: Any
) -> Exchange:
    """A successful non-streamed Anthropic Messages call, as the proxy hands it over.

    ``n`` numbers the call (its prompt says "hello <n>"); ``request`` and ``response`` replace the
    bodies (as dicts); any other keyword replaces that field of the Exchange. Ids are unique and
    time ordered; ``started_at`` grows by one second per call made."""
    seq = next(_ids)
    t = overrides.pop("started_at", 1_750_000_000.0 + seq)
    if request is None:
        request = anthropic_request([{"role": "user", "content": "hello" if n is None else f"hello {n}"}])
    values: dict[str, Any] = {
        "id": f"{time.time_ns():016x}{seq:06x}",
        "provider": "anthropic",
        "upstream": "https://api.anthropic.com",
        "method": "POST",
        "path": "/v1/messages",
        "query": "",
        "session_label": "s1",
        "annotations": (),
        "request_headers": (("content-type", "application/json"), ("x-api-key", "[redacted]")),
        "key_fingerprint": "f" * 16,
        "request_body": json.dumps(request).encode(),
        "status": 200,
        "response_headers": (("content-type", "application/json"),),
        "response_body": json.dumps(response or anthropic_response()).encode(),
        "started_at": t,
        "first_byte_at": t + 0.25,
        "ended_at": t + 0.5,
        "outcome": "ok",
        "error": None,
        "client": "test-agent/1.0",
    }
    values.update(overrides)
    return Exchange(**values)


def exchange_at(body: dict, t: float, **overrides: Any) -> Exchange:
    """A call with this request body at T0 + t, with no session label (the analysis finds the session)."""
    overrides.setdefault("session_label", None)
    return make_exchange(request=body, started_at=T0 + t, **overrides)


def anthropic_request(messages: list | None = None, **extra: Any) -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "You are a test.",
        "messages": messages or [{"role": "user", "content": "hello"}],
        **extra,
    }


def anthropic_response(text: str = "hi there", usage: dict | None = None) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": usage
        if usage is not None
        else {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100},
    }


def anthropic_sse(text: str = "streamed answer", input_tokens: int = 12, output_tokens: int = 4) -> bytes:
    """A streamed Anthropic Messages response as the wire carries it."""
    msg = {
        "id": "msg_s",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    events = [
        ("message_start", {"type": "message_start", "message": msg}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        ("ping", {"type": "ping"}),
    ]
    for word in text.split(" "):
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}},
            )
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output_tokens}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


def capture(path: Path, exchanges, **writer_options: Any):
    """Store exchanges through a real CaptureWriter; returns a reader on the database."""
    writer = CaptureWriter(path, **writer_options)
    writer.start()
    for ex in exchanges:
        writer.submit(ex)
    assert writer.stop()
    assert writer.stats().failed == 0
    return queries.open_db(path, segment_texts=SegmentTexts)


def analysed(path: Path, exchanges, analyzer: Analyzer | None = None):
    """Store exchanges through a real writer with the analyzer, none of them failing; returns (reader, analyzer)."""
    analyzer = analyzer or Analyzer()
    writer = CaptureWriter(path, analyzers=[analyzer])
    writer.start()
    for ex in exchanges:
        writer.submit(ex)
    assert writer.stop()
    stats = writer.stats()
    assert stats.failed == 0 and stats.analysis_failed == 0, stats.last_error
    return queries.open_db(path, segment_texts=SegmentTexts), analyzer


def analysis_and_index(path: Path, columns: tuple[str, ...]) -> tuple[dict, list]:
    """What the analyzers left in a store: each call's ``columns`` by id, and the search index's rows."""
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        calls = {r[0]: {k: queries.get_call(db, r[0])[k] for k in columns} for r in db.execute("SELECT id FROM calls")}
        index = db.execute(
            """SELECT s.hash, s.area, o.session, o.call_id, o.body, o.pointer
               FROM search_occurrences o JOIN search_segments s ON s.id = o.segment ORDER BY 1, 3, 4"""
        ).fetchall()
    finally:
        db.close()
    return calls, index


class _Payload:
    """Unpickling this makes a folder: proof that the unpickler ran the file's code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def plant_pickle_spool(path: Path, marker: Path) -> bytes:
    """A spool in the format older versions read with pickle: 8-byte length, then the pickle."""
    data = pickle.dumps([_Payload(str(marker))])
    path.write_bytes(struct.pack("<Q", len(data)) + data)
    os.chmod(path, 0o600)
    return data


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def claude_code_like_session(calls: int, gaps: list[float]) -> list:
    """A Claude Code-shaped session (many tools, a system prompt in blocks, tool rounds) with its
    breakpoints stripped: no cache_control anywhere."""
    tools = [
        {
            "name": n,
            "description": _words(180, n),
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
        for n in ("Read", "Edit", "Bash", "Grep", "Glob", "Write")
    ]
    system = [
        {"type": "text", "text": "You are Claude Code, a coding agent."},
        {"type": "text", "text": _words(2200, "policy")},
    ]
    messages: list = [{"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}]
    out, t = [], 0.0
    for i in range(calls):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": system,
            "tools": tools,
            "messages": json.loads(json.dumps(messages)),
        }
        out.append(make_exchange(request=body, started_at=T0 + t, session_label="cc"))
        t += gaps[i] if i < len(gaps) else 20.0
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": f"f{i}.py"}}
        messages += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": _words(400, f"line{i}x")}],
            },
        ]
    return out
