"""What the analysis reads of one call, from the writer (live) or from the store (reindex).

Also the declared markers: our own agent announces its effects in ``x-ctxscope-event`` request
headers, which the proxy strips and stores as annotations. A value is a kind (``compaction``), a
kind with parameters (``compaction; tokens_before=81234; reason=budget``) or a JSON object with a
``kind`` key; each becomes a marker of that kind with ``detail.declared = true``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.analyses.markers import Marker
from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.analysis_rows import rowid_of
from ctxscope.inspector.store.db import Db
from ctxscope.vocab.effects import parse_effect, split_effects
from ctxscope.vocab.headers import Annotation


@dataclass(frozen=True)
class CallInput:
    """One stored call as the analysis sees it."""

    id: str
    rowid: int
    provider: str
    api: str | None
    session: str  # as stored now (the writer's first guess when not inserted yet)
    seq: int | None  # None: not inserted yet
    session_label: str | None
    key_fingerprint: str | None
    client: str | None  # the user agent: calls without a session id group per key and client
    headers: dict[str, str]  # request headers, names lowercased, secrets already redacted
    annotations: tuple[tuple[str, str], ...]  # x-ctxscope-* headers
    body: Any  # the parsed request body (None: empty, undecodable or not JSON)
    response: Any  # the final response object, reassembled from a stream
    usage: dict | None  # {input (total), output, cache_read, cache_write}
    started_at: float  # unix seconds
    capture_epoch: int
    ok: bool  # the provider answered successfully
    attempt: int
    retry_of: str | None
    request_sha256: str | None
    method: str | None
    path: str | None
    raw: bytes | None  # the request body with its Content-Encoding undone (what ``body`` was parsed from)
    upstream: str | None = None  # as recorded: the base URL, or an on-demand upstream's name (``sim``)
    no_failed_twin: bool = False  # the writer knows no failed call with this body is in its retry window

    def inserted(self, rowid: int, session: str, seq: int | None, attempt: int, retry_of: str | None) -> CallInput:
        """A copy with the row the writer inserted (analysed before its insert, the call had none). Made
        without ``dataclasses.replace``, which costs more than the rest of the copy: it runs on every call."""
        new = object.__new__(CallInput)
        new.__dict__.update(self.__dict__, rowid=rowid, session=session, seq=seq, attempt=attempt, retry_of=retry_of)
        return new


def _headers(pairs: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[1], str):
            out.setdefault(str(pair[0]).lower(), pair[1])
    return {k: v for k, v in out.items() if v != "[redacted]"}


def _usage(row: dict) -> dict | None:
    usage = {k: row.get("usage_" + k) for k in ("input", "output", "cache_read", "cache_write")}
    return usage if any(v is not None for v in usage.values()) else None


def _ok(row: dict) -> bool:
    return row.get("outcome") == "ok" and row.get("status") is not None and row["status"] < 400


def _common(row: dict, rowid: int) -> dict:
    return {
        "id": row["id"],
        "rowid": rowid,
        "provider": row.get("provider") or "",
        "upstream": row.get("upstream"),
        "api": row.get("api"),
        "session": row["session"],
        "seq": row["seq"],
        "session_label": row.get("session_label"),
        "key_fingerprint": row.get("key_fingerprint"),
        "client": row.get("client"),
        "usage": _usage(row),
        "capture_epoch": row.get("capture_epoch") or 0,
        "ok": _ok(row),
        "attempt": row.get("attempt") or 1,
        "retry_of": row.get("retry_of"),
        "request_sha256": row.get("request_sha256"),
        "method": row.get("method"),
        "path": row.get("path"),
    }


def from_writer(db: Db, call: dict) -> CallInput:
    """The input of a call the CaptureWriter just inserted (``call`` as given to analyzers), made
    once for all of them (kept in ``call``: each analyzer is given the same dict)."""
    made = call.get("_input")
    if isinstance(made, CallInput) and made.id == call["id"]:
        if made.rowid != call.get("_rowid"):  # made before the insert: now it has its row and final session
            call["_input"] = made = made.inserted(
                call["_rowid"], call["session"], call.get("seq"), call.get("attempt") or 1, call.get("retry_of")
            )
        return made
    call["_input"] = made = _from_writer(db, call)
    return made


def _from_writer(db: Db, call: dict) -> CallInput:
    ex = call["_exchange"]
    parsed = call.get("_parsed")
    rowid = call.get("_rowid") or rowid_of(db, call["id"])
    fields = _common(call, rowid)
    fields.update(
        headers=_headers(ex.request_headers),
        annotations=tuple(ex.annotations),
        body=call.get("_request_json"),
        raw=call.get("_request_body"),
        response=parsed.body if parsed is not None else None,
        started_at=unix_time(call["started_at"]),  # the stored time, so reindex sees the very same
        no_failed_twin=bool(call.get("_no_failed_twin")),
    )
    # Every field given: made without the frozen dataclass's __init__ (a setattr per field), as
    # ``inserted`` makes its copy, since it runs for every stored call.
    made = object.__new__(CallInput)
    made.__dict__.update(fields)
    return made


def from_row(db: Db, call_id: str) -> CallInput:
    """The input of a stored call, read back from the database (for reindex)."""
    row = queries.get_call(db, call_id)
    if row is None:
        raise KeyError(f"no call {call_id!r}")
    rowid = rowid_of(db, call_id)
    try:
        response = queries.get_final_response(db, call_id)
    except Exception:  # an unparseable response only costs the provider diagnostics and response id
        response = None
    annotations = tuple(
        (str(p[0]), str(p[1])) for p in row.get("annotations") or () if isinstance(p, list) and len(p) == 2
    )
    raw = queries.get_request_body(db, call_id)
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        body = None
    return CallInput(
        headers=_headers(row.get("request_headers")),
        annotations=annotations,
        body=body,
        raw=raw or None,
        response=response,
        started_at=unix_time(row.get("started_at")),
        **_common(row, rowid),
    )


def parse_event(value: str) -> Marker | None:
    """One ``x-ctxscope-event`` effect as a declared marker; None for an empty value."""
    effect = parse_effect(value)
    if effect is None:
        return None
    detail = dict(effect.params)
    pointer = detail.pop("pointer", None)
    return Marker(effect.kind, pointer if isinstance(pointer, str) else None, {**detail, "declared": True})


def declared_markers(annotations: tuple[tuple[str, str], ...] | list) -> list[Marker]:
    """The markers our agent declared in its ``x-ctxscope-event`` headers, in header order."""
    out = []
    for name, value in annotations:
        if str(name).lower() != Annotation.EVENT or not isinstance(value, str):
            continue
        for part in split_effects(value):
            marker = parse_event(part)
            if marker is not None:
                out.append(marker)
    return out
