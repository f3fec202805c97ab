"""Copy as cURL for the page: the command for one call, its body in a heredoc or in the download."""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.share.bodies import export_body
from ctxscope.inspector.share.curl import curl_command
from ctxscope.inspector.store import queries


def download_name(call_id: str, form: str, masked: bool) -> str:
    """The file name the page's body download gets (``routes.raw_bin``), which the command reads."""
    safe_id = "".join(ch for ch in call_id if ch.isalnum() or ch in "-_")[:80]
    return f"{safe_id}-request-{form}" + ("-masked" if masked else "") + ".bin"


def curl_view(db: sqlite_utils.Database, call_id: str, via: str | None) -> dict | None:
    """``{command, body_file, key_env, masked}``; None for an unknown call. ``via``: a base URL to
    send to instead of the captured upstream (the daemon's provider route, to record the answer)."""
    row = queries.get_call(db, call_id)
    if row is None:
        return None
    if via is not None:
        label = row.get("session_label")
        via = via.rstrip("/") + (f"/s/{label}" if label else "") + "/" + str(row.get("provider") or "")
    body = export_body(db, row["id"], "request", "wire")
    data = body.data if body is not None else b""
    masked = body is not None and body.masked
    decoded = body is not None and body.form == "decoded"
    cmd = curl_command(row, data, body_decoded=decoded, target=via)
    if cmd.body_file is not None:  # too big or binary for a heredoc: the download is the file
        name = download_name(row["id"], "decoded" if decoded else "wire", masked)
        cmd = curl_command(row, data, body_decoded=decoded, target=via, body_file=name)
    return {"command": cmd.text, "body_file": cmd.body_file, "key_env": cmd.key_env, "masked": masked}
