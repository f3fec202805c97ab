"""The UI's replay: the call re-sent through this daemon with the key from its environment, then
the original and the replay side by side (docs/architecture.md, "Replay")."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aiohttp

from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.inspector.share.curl import key_env_for
from ctxscope.inspector.share.replay import ReplayError, ReplayRequest, build_request, comparison, find_replay
from ctxscope.inspector.store import queries
from ctxscope.web.pool import ReadPool

WAIT_S = 30.0  # for the writer to store the replay
SEND_TIMEOUT_S = 600.0


def _build(db, call_id: str, daemon_url: str, options: dict) -> ReplayRequest:
    row = queries.get_call(db, call_id)
    if row is None:
        raise ReplayError(f"no call {call_id!r}")
    model = options.get("model")
    edits = options.get("edits") or []
    if model is not None and not isinstance(model, str):
        raise ReplayError("model must be a string")
    if not isinstance(edits, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                              for e in edits):  # fmt: skip
        raise ReplayError("edits must be a list of [pointer, value] pairs")
    key = os.environ.get(key_env_for(row)) or None
    return build_request(db, row["id"], daemon_url, key=key, model=model or None,
                         edits=[(p, v) for p, v in edits])  # fmt: skip


async def replay(pool: ReadPool, call_id: str, daemon_url: str, options: dict[str, Any]) -> dict:
    """Send the replay and wait for the writer to store it; ReplayError when it cannot be sent."""
    req = await pool.run(_build, call_id, daemon_url, options)
    timeout = aiohttp.ClientTimeout(total=SEND_TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session,
        session.request(req.method, req.url, headers=req.headers, data=req.body) as resp,
    ):
        status = resp.status
        await resp.read()
    original = req.original
    deadline = time.monotonic() + WAIT_S
    found = await pool.run(find_replay, original, req.nonce)
    while found is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        found = await pool.run(find_replay, original, req.nonce)
    if found is None:
        raise ReplayError(f"the replay was answered ({status}) but not stored within {WAIT_S:.0f} s")
    result = await pool.run(comparison, original, found, load_prices())
    return {"status": status, "session": req.session, **result}
