"""A stored body as bytes for a download or stdout, with keys the client put in it masked.

Bodies are stored byte-exact, keys and all. An export masks key-shaped values length for length
(``redact.mask_key_bytes``) unless the exact bytes are asked for. A compressed body cannot be
masked in place: when its decoded form holds something to mask, the export is the decoded body,
masked, and says so (``form``); when it holds nothing, the compressed bytes go out as they are.
Shared by the UI's download, `ctxscope show --request-raw/--response-raw`, copy as cURL and the exports.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from ctxscope.inspector.store import queries as q
from ctxscope.proxy.redaction.mask import mask_key_bytes


@dataclass(frozen=True)
class BodyExport:
    data: bytes
    form: str  # "wire" (as forwarded / received) or "decoded" (its Content-Encoding undone)
    masked: bool  # whether anything in ``data`` was masked


def _wire(db: sqlite_utils.Database, call_id: str, kind: str) -> bytes:
    return q.get_request_raw(db, call_id) if kind == "request" else q.get_response_raw(db, call_id)


def _decoded(db: sqlite_utils.Database, call_id: str, kind: str) -> bytes | None:
    return q.get_request_body(db, call_id) if kind == "request" else q.get_response_body(db, call_id)


def export_body(
    db: sqlite_utils.Database, call_id: str, kind: str, form: str = "wire", *, exact: bool = False
) -> BodyExport | None:
    """The body of ``call_id`` (a full id) in ``form``; None when its decoded form was asked for and
    it cannot be decoded. KeyError for an unknown call."""
    if exact:
        data = _wire(db, call_id, kind) if form == "wire" else _decoded(db, call_id, kind)
        return None if data is None else BodyExport(data, form, False)
    decoded = _decoded(db, call_id, kind)
    if form == "decoded":
        if decoded is None:
            return None
        masked = mask_key_bytes(decoded)
        return BodyExport(masked, "decoded", masked is not decoded)
    wire = _wire(db, call_id, kind)
    # Not compressed, or not decodable (corrupt, or an unknown coding): mask what can be seen.
    if decoded is None or decoded == wire:
        masked = mask_key_bytes(wire)
        return BodyExport(masked, "wire", masked is not wire)
    masked = mask_key_bytes(decoded)
    if masked is decoded:
        return BodyExport(wire, "wire", False)
    return BodyExport(masked, "decoded", True)
