"""What one captured exchange says, computed without the database: the columns of its call row.

Decodes the bodies (a body over the size limit decoded is kept as sent and analysed no further),
parses the request JSON (reusing the session's recent bodies: docs/architecture.md, "Bodies parsed
at the cost of their new bytes") and the response, and redacts what must never be stored. The
writer's ``ingest`` adds what needs the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.base import json_text
from ctxscope.inspector.base.body_reuse import BodyMemory, parse
from ctxscope.inspector.base.clock import iso
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.redaction.redact import redact_headers, redact_query
from ctxscope.proxy.wire.apis import detect_api
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE, BodyDecodeError, decode_body
from ctxscope.proxy.wire.responses import ParsedResponse, parse_response
from ctxscope.vocab.apis import Api
from ctxscope.vocab.kinds import Outcome


def session_key(ex: Exchange) -> str:
    """Explicit label, else the API key's fingerprint, else one anonymous session."""
    if ex.session_label:
        return ex.session_label
    if ex.key_fingerprint:
        return "key:" + ex.key_fingerprint[:12]
    return "anon"


@dataclass
class Derived:
    """What one exchange says, computed without the database."""

    row: dict[str, Any]
    request_body: bytes | None  # decoded; None when it could not be decoded
    response_body: bytes | None
    request_json: Any
    parsed: ParsedResponse | None


# A body smaller than this is parsed by ``json.loads`` and hashed whole: reusing a recent body costs more
# than that for a small body (its bookkeeping is ten microseconds or more), and what the next body could
# reuse of it is as small (docs/architecture.md, "Bodies parsed at the cost of their new bytes").
SMALL_BODY = 1024

# json.dumps with arguments builds an encoder on every call: these are built once.
_PAIRS = json_text.encoder(separators=(", ", ": "))
_COMPACT = json_text.encoder(default=str)


def _pairs_json(pairs: Sequence[tuple[str, str]]) -> str:
    return _PAIRS([[k, v] for k, v in pairs]) if pairs else "[]"


def _dumps(value: Any) -> str | None:
    if value is None:
        return None
    return _COMPACT(value)


def _decode(data: bytes, encoding: str | None, truncated_ok: bool, max_size: int) -> tuple[bytes | None, str | None]:
    """The decoded body, or None and why not: a body over ``max_size`` decoded (a compression
    bomb, say) is stored as sent and analysed no further."""
    if not encoding:
        return data, None
    try:
        return decode_body(data, encoding, max_size, allow_truncated=truncated_ok), None
    except BodyDecodeError as e:
        return None, str(e)


def _model_from_path(path: str) -> str | None:
    last = [s for s in path.split("?", 1)[0].split("/") if s][-1:]
    if last and ":" in last[0]:
        name = last[0].rsplit(":", 1)[0]
        return name if name and not name.startswith("v1") else None
    return None


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0, 3)


def derive(ex: Exchange, max_decoded_bytes: int = DEFAULT_MAX_SIZE, bodies: BodyMemory | None = None) -> Derived:
    """Decode and parse an exchange into the columns that need no database. With ``bodies`` (the
    writer's recent request bodies), the request is parsed and hashed at the cost of its new bytes
    (docs/architecture.md, "Bodies parsed at the cost of their new bytes")."""
    api = detect_api(ex.method, ex.path)
    req_enc = ex.header("content-encoding")
    resp_enc = ex.header("content-encoding", response=True)
    resp_ctype = ex.header("content-type", response=True)
    request_body, req_err = _decode(ex.request_body, req_enc, False, max_decoded_bytes)
    response_body, resp_err = _decode(ex.response_body, resp_enc, ex.outcome != Outcome.OK, max_decoded_bytes)

    request_json: Any = None
    json_ok: int | None = None
    request_sha256 = None
    session = session_key(ex)
    if request_body:
        try:
            if len(request_body) < SMALL_BODY:
                request_json, reusable = json.loads(request_body), None
            else:
                request_json, reusable = parse(request_body, bodies.get(session) if bodies is not None else ())
            json_ok = 1
        except (ValueError, RecursionError):
            json_ok, reusable = 0, None
        if reusable is not None:
            request_sha256 = reusable.digest
            if bodies is not None:
                bodies.add(session, reusable)
        else:
            request_sha256 = hashlib.sha256(request_body).hexdigest()

    parsed: ParsedResponse | None = None
    parse_error: str | None = None
    if response_body is not None and (ex.status is not None or response_body):
        try:
            parsed = parse_response(api, ex.status, resp_ctype, response_body)
        except Exception as e:  # a parser bug must not lose the call: keep the bytes, note it
            parse_error = f"{type(e).__name__}: {e}"

    req = request_json if isinstance(request_json, dict) else {}
    model = req.get("model") if isinstance(req.get("model"), str) else None
    if model is None and api == Api.GEMINI_GENERATE:
        model = _model_from_path(ex.path)
    if model is None and parsed is not None and isinstance(parsed.body, dict):
        m = parsed.body.get("model") or parsed.body.get("modelVersion")
        model = m if isinstance(m, str) else None
    stream = req.get("stream") is True or bool(parsed and parsed.stream)
    usage = parsed.usage if parsed else None

    extra = None
    if ex.extra:
        try:
            extra = _dumps(ex.extra)
        except (TypeError, ValueError):
            extra = None

    row = {
        "id": ex.id,
        "session": session,
        "provider": ex.provider,
        "upstream": ex.upstream,
        "api": api,
        "model": model,
        "method": ex.method,
        "path": ex.path,
        "query": redact_query(ex.query) if ex.query else ex.query,
        "status": ex.status,
        "outcome": ex.outcome,
        "error": ex.error,
        "stream": int(stream),
        "started_at": iso(ex.started_at),
        "first_byte_at": iso(ex.first_byte_at),
        "ended_at": iso(ex.ended_at),
        "ttfb_ms": _ms(ex.started_at, ex.first_byte_at),
        "duration_ms": _ms(ex.started_at, ex.ended_at),
        "request_bytes": len(ex.request_body),
        "response_bytes": len(ex.response_body),
        "request_encoding": req_enc,
        "response_encoding": resp_enc,
        "request_decode_error": req_err,
        "response_decode_error": resp_err,
        "request_content_type": ex.header("content-type"),
        "response_content_type": resp_ctype,
        # The proxy already redacted them; doing it again here keeps a key out of the file regardless.
        # As lists: the store keeps them as header sets (store/layout/headers.py), not as this JSON.
        "request_headers": [[k, v] for k, v in redact_headers(list(ex.request_headers))],
        "response_headers": [[k, v] for k, v in redact_headers(list(ex.response_headers))],
        "annotations": _pairs_json(ex.annotations),
        "key_fingerprint": ex.key_fingerprint,
        "session_label": ex.session_label,
        "client": ex.client,
        "usage_input": usage.input if usage else None,
        "usage_output": usage.output if usage else None,
        "usage_cache_read": usage.cache_read if usage else None,
        "usage_cache_write": usage.cache_write if usage else None,
        "usage_raw": _dumps(usage.raw) if usage else None,
        "usage_semantics": usage.semantics if usage else None,
        "request_json_ok": json_ok,
        # 128 bits are plenty to find the same body again, and the row and its index stay smaller.
        "request_sha256": request_sha256[:32] if request_sha256 else None,
        "response_complete": None if parsed is None else int(parsed.complete),
        "stop_reason": parsed.stop_reason if parsed else None,
        "response_error": _dumps(parsed.error) if parsed else None,
        "event_count": parsed.event_count if parsed else None,
        "parse_error": parse_error,
        "extra": extra,
    }
    return Derived(row, request_body, response_body, request_json, parsed)
