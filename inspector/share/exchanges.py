"""A stored call back as the Exchange the proxy handed over, its bodies masked for export.

The exports (HAR, bundle) carry these fields, and the import turns them back into an Exchange for
the writer's ingest, so an imported call is stored and analysed like a live one.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.share.bodies import export_body
from ctxscope.inspector.store import queries
from ctxscope.proxy.exchange import Exchange

# The analysis a bundle carries per call, and the columns a round trip must reproduce.
ANALYSIS_KEYS = (
    "session",
    "seq",
    "session_source",
    "thread",
    "parent_thread",
    "predecessor",
    "relation",
    "pointer",
    "epoch_reason",
    "relation_detail",
    "tokens_estimated",
    "tokens_by_category",
    "cache_verdict",
    "cache",
    "markers",
    "has_compaction_before",
    "attempt",
    "retry_of",
)


@dataclass(frozen=True)
class Exported:
    """One call as exported: the Exchange (bodies masked), its capture epoch and its analysis."""

    exchange: Exchange
    capture_epoch: int
    analysis: dict
    request_decoded: bool  # the request body is the decoded form of a compressed one
    response_decoded: bool


def _pairs(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(p[0]), str(p[1])) for p in value or () if isinstance(p, (list, tuple)) and len(p) == 2)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _without_encoding(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in headers if k.lower() != "content-encoding")


def _body(db: sqlite_utils.Database, call_id: str, kind: str) -> tuple[bytes, bool]:
    body = export_body(db, call_id, kind, "wire")
    if body is None:
        return b"", False
    return body.data, body.form == "decoded"


def exported_call(db: sqlite_utils.Database, call_id: str) -> Exported:
    """The call as an Exchange whose bodies hold no key (``share/bodies.py``). KeyError if unknown."""
    row = queries.get_call(db, call_id)
    if row is None:
        raise KeyError(f"no call {call_id!r}")
    request, req_decoded = _body(db, row["id"], "request")
    response, resp_decoded = _body(db, row["id"], "response")
    req_headers, resp_headers = _pairs(row.get("request_headers")), _pairs(row.get("response_headers"))
    ex = Exchange(
        id=row["id"],
        provider=row.get("provider") or "",
        upstream=row.get("upstream") or "",
        method=row.get("method") or "POST",
        path=row.get("path") or "",
        query=row.get("query") or "",
        session_label=row.get("session_label"),
        annotations=_pairs(row.get("annotations")),
        request_headers=_without_encoding(req_headers) if req_decoded else req_headers,
        key_fingerprint=row.get("key_fingerprint"),
        request_body=request,
        status=row.get("status"),
        response_headers=_without_encoding(resp_headers) if resp_decoded else resp_headers,
        response_body=response,
        started_at=unix_time(row.get("started_at")),
        first_byte_at=unix_time(row["first_byte_at"]) if row.get("first_byte_at") else None,
        ended_at=unix_time(row.get("ended_at")),
        outcome=row.get("outcome") or "ok",
        error=row.get("error"),
        client=row.get("client"),
        extra=_dict(row.get("extra")),
    )
    analysis = {k: row.get(k) for k in ANALYSIS_KEYS}
    return Exported(ex, int(row.get("capture_epoch") or 0), analysis, req_decoded, resp_decoded)


def exchange_fields(ex: Exchange) -> dict:
    """The Exchange as JSON: bodies in base64, pairs as lists."""
    return {
        "id": ex.id,
        "provider": ex.provider,
        "upstream": ex.upstream,
        "method": ex.method,
        "path": ex.path,
        "query": ex.query,
        "session_label": ex.session_label,
        "annotations": [list(p) for p in ex.annotations],
        "request_headers": [list(p) for p in ex.request_headers],
        "key_fingerprint": ex.key_fingerprint,
        "request_body": base64.b64encode(ex.request_body).decode(),
        "status": ex.status,
        "response_headers": [list(p) for p in ex.response_headers],
        "response_body": base64.b64encode(ex.response_body).decode(),
        "started_at": ex.started_at,
        "first_byte_at": ex.first_byte_at,
        "ended_at": ex.ended_at,
        "outcome": ex.outcome,
        "error": ex.error,
        "client": ex.client,
        "extra": ex.extra,
    }


class BadExport(ValueError):
    """A file that is not an export this version can read, or an entry of it that is malformed."""


def exchange_from_fields(f: dict) -> Exchange:
    """The inverse of ``exchange_fields``; BadExport when a field is missing or of the wrong type."""
    try:
        return Exchange(
            id=str(f["id"]),
            provider=str(f["provider"]),
            upstream=str(f["upstream"]),
            method=str(f["method"]),
            path=str(f["path"]),
            query=str(f.get("query") or ""),
            session_label=f.get("session_label"),
            annotations=_pairs(f.get("annotations")),
            request_headers=_pairs(f.get("request_headers")),
            key_fingerprint=f.get("key_fingerprint"),
            request_body=base64.b64decode(f.get("request_body") or "", validate=True),
            status=None if f.get("status") is None else int(f["status"]),
            response_headers=_pairs(f.get("response_headers")),
            response_body=base64.b64decode(f.get("response_body") or "", validate=True),
            started_at=float(f["started_at"]),
            first_byte_at=None if f.get("first_byte_at") is None else float(f["first_byte_at"]),
            ended_at=float(f["ended_at"]),
            outcome=str(f.get("outcome") or "ok"),
            error=f.get("error"),
            client=f.get("client"),
            extra=_dict(f.get("extra")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadExport(f"malformed call: {type(exc).__name__}: {exc}") from exc
