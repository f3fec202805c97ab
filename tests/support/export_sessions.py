"""A big agent session for the export tests: 100 calls, each the previous prompt plus ~20 KB (UTF-8
beyond ASCII, as a JavaScript client sends it), ~100 MB of request bytes in all, stored through
the writer's ingest under the label "big", and a one-call session "lone" beside it (the baseline)."""

from __future__ import annotations

import json
from pathlib import Path

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.ingest import IngestState, ingest

from support.factories import anthropic_request, make_exchange

CALLS, GROWTH = 100, 20_000


def growing_session(path: Path) -> tuple[int, bytes]:
    """Store the big session and a one-call one through the writer's ingest; (request bytes sent,
    the last request)."""
    db = store.connect(path)
    state = IngestState(capture_epoch=store.next_capture_epoch(db))
    messages: list[dict] = []
    sent = 0
    for i in range(CALLS):
        messages.append({"role": "user", "content": f"step {i} — ✓ 😀 " + f"tool output line {i} " * (GROWTH // 20)})
        body = json.dumps(anthropic_request(messages), ensure_ascii=False).encode()
        sent += len(body)
        db.execute("BEGIN IMMEDIATE")
        ingest(db, make_exchange(session_label="big", request_body=body), state)
        db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    ingest(db, make_exchange(session_label="lone"), state)
    db.execute("COMMIT")
    db.close()
    return sent, body
