"""Re-sending a call from the page: copy as cURL (the command for one call, its body in a heredoc
or in the download) and replay (the call re-sent through this daemon with the key from its
environment, then the original and the replay side by side: docs/architecture.md, "Replay")."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aiohttp
import sqlite_utils

from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.inspector.share.bodies import export_body
from ctxscope.inspector.share.curl import curl_command, daemon_route, key_env_for, needs_daemon
from ctxscope.inspector.share.replay import ReplayError, ReplayRequest, build_request, comparison, find_replay
from ctxscope.inspector.store import queries
from ctxscope.web.pool import ReadPool


def download_name(call_id: str, form: str, masked: bool) -> str:
    """The file name the page's body download gets (``routes.raw_bin``), which the command reads."""
    safe_id = "".join(ch for ch in call_id if ch.isalnum() or ch in "-_")[:80]
    return f"{safe_id}-request-{form}" + ("-masked" if masked else "") + ".bin"


def curl_view(db: sqlite_utils.Database, call_id: str, daemon_url: str, via_daemon: bool) -> dict | None:
    """``{command, body_file, key_env, masked}``; None for an unknown call. ``via_daemon``: send to
    this daemon's provider route (at ``daemon_url``, its own address) instead of the captured
    upstream, to record the answer; an imported or simulator call always goes there (NoRoute when it has none)."""
    row = queries.get_call(db, call_id)
    if row is None:
        return None
    via = daemon_route(row, daemon_url) if via_daemon or needs_daemon(row) else None
    body = export_body(db, row["id"], "request", "wire")
    data = body.data if body is not None else b""
    masked = body is not None and body.masked
    decoded = body is not None and body.form == "decoded"
    cmd = curl_command(row, data, body_decoded=decoded, target=via)
    if cmd.body_file is not None:  # too big or binary for a heredoc: the download is the file
        name = download_name(row["id"], "decoded" if decoded else "wire", masked)
        cmd = curl_command(row, data, body_decoded=decoded, target=via, body_file=name)
    return {"command": cmd.text, "body_file": cmd.body_file, "key_env": cmd.key_env, "masked": masked}


WAIT_S = 30.0  # for the writer to store the replay
SEND_TIMEOUT_S = 600.0


def _build(db: sqlite_utils.Database, call_id: str, daemon_url: str, options: dict) -> ReplayRequest:
    row = queries.get_call(db, call_id)
    if row is None:
        raise ReplayError(f"no call {call_id!r}")
    model = options.get("model")
    edits = options.get("edits") or []
    if model is not None and not isinstance(model, str):
        raise ReplayError("model must be a string")
    if not isinstance(edits, list) or not all(
        isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in edits
    ):
        raise ReplayError("edits must be a list of [pointer, value] pairs")
    env = key_env_for(row)
    key = (os.environ.get(env) or None) if env else None
    return build_request(
        db, row["id"], daemon_url, key=key, model=model or None, edits=[(p, v) for p, v in edits], cli=False
    )


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
