"""HAR 1.2 for a session (DevTools and mitmproxy open it), and HAR files read back as Exchanges.

Each call is one entry: the request and response headers as stored (redacted), the bodies as sent
(masked where they held a key, ``share/bodies.py``), a stream as its raw SSE text, base64 where a
body is not UTF-8 text. HAR wants ``content.text`` decoded: a compressed body is written decoded,
and its exact wire bytes go in ``_wire`` (base64) so a ctxscope import is byte-exact. ``_ctxscope``
holds what HAR has no field for (call id, provider route, session label, key fingerprint, exact
times, outcome), so a round trip reproduces the analysis.
"""

from __future__ import annotations

import base64
import codecs
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from ctxscope.inspector.share.curl import NoRoute, daemon_route, needs_daemon
from ctxscope.inspector.share.exchanges import BadExport, Exported, exchange_fields, exchange_from_fields
from ctxscope.inspector.share.imported import UNKNOWN, BadImport, mark_imported
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.decoding import BodyDecodeError, decode_body

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _header(pairs: Iterable[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in pairs if k.lower() == name), None)


class BodyText(Protocol):
    """What a body's ``text`` field holds: the text itself (``inline_text``), or a placeholder the
    streaming writer fills in chunks (``share/har_writer.py``). ``as_base64``: the bytes in base64,
    else the bytes decoded as UTF-8 (known valid)."""

    def __call__(self, data: bytes, as_base64: bool) -> str: ...


def inline_text(data: bytes, as_base64: bool) -> str:
    return base64.b64encode(data).decode() if as_base64 else data.decode("utf-8")


def is_utf8(data: bytes, chunk: int = 1 << 20) -> bool:
    """Whether ``data`` is UTF-8, checked a chunk at a time (no str of a whole big body)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), chunk):
            decoder.decode(data[start : start + chunk])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _content(wire: bytes, encoding: str | None, decoded_already: bool, text: BodyText) -> dict:
    """``text`` (decoded, as HAR wants; base64 when not UTF-8), and ``_wire`` when the bytes sent differ."""
    data, compressed = wire, False
    if encoding and not decoded_already and wire:
        try:
            data, compressed = decode_body(wire, encoding, allow_truncated=True), True
        except BodyDecodeError:
            data = wire  # undecodable: the bytes as they are
    out: dict[str, Any] = {"size": len(data)}
    if is_utf8(data):
        out["text"] = text(data, False)
    else:
        out["text"], out["encoding"] = text(data, True), "base64"
    if compressed and data != wire:
        out["_wire"] = text(wire, True)
    return out


def _base(ex: Exchange, daemon_url: str | None) -> str:
    """The base URL an entry names: the stored upstream, or the daemon's route for a call only the
    daemon reaches (the simulator's, whose stored upstream is its route name ``sim``: docs/architecture.md,
    "The simulator's own address"), when the daemon's URL is known."""
    call = {
        "id": ex.id,
        "provider": ex.provider,
        "upstream": ex.upstream,
        "annotations": ex.annotations,
        "session_label": ex.session_label,
    }
    if daemon_url is not None and needs_daemon(call):
        try:
            return daemon_route(call, daemon_url)
        except NoRoute:  # an imported call of no known API: only what its file said
            pass
    return ex.upstream.rstrip("/")


def har_entry(e: Exported, daemon_url: str | None = None, text: BodyText = inline_text) -> dict:
    """One call as a HAR entry; ``daemon_url``: the daemon a simulator call is named through;
    ``text``: what the bodies' text fields hold (``BodyText``)."""
    ex = e.exchange
    url = _base(ex, daemon_url) + ex.path + ("?" + ex.query if ex.query else "")
    total = max(0.0, (ex.ended_at - ex.started_at) * 1000.0)
    wait = max(0.0, ((ex.first_byte_at or ex.ended_at) - ex.started_at) * 1000.0)
    req = _content(ex.request_body, ex.header("content-encoding"), e.request_decoded, text)
    resp = _content(ex.response_body, ex.header("content-encoding", response=True), e.response_decoded, text)
    post: dict[str, Any] = {"mimeType": ex.header("content-type") or "", "text": req["text"]}
    if req.get("encoding"):
        post["_encoding"] = "base64"
    if req.get("_wire"):
        post["_wire"] = req["_wire"]
    request: dict[str, Any] = {
        "method": ex.method,
        "url": url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": [{"name": k, "value": v} for k, v in ex.request_headers],
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(ex.query, keep_blank_values=True)],
        "headersSize": -1,
        "bodySize": len(ex.request_body),
    }
    if ex.request_body:
        request["postData"] = post
    resp["mimeType"] = ex.header("content-type", response=True) or ""
    status = ex.status or 0
    fields = exchange_fields(replace(ex, request_body=b"", response_body=b""))  # (no base64 of the bodies)
    for key in ("request_body", "response_body", "request_headers", "response_headers", "method", "status"):
        fields.pop(key)  # in the HAR fields already
    return {
        "startedDateTime": _iso(ex.started_at),
        "time": round(total, 3),
        "request": request,
        "response": {
            "status": status,
            "statusText": _REASONS.get(status, ""),
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": [{"name": k, "value": v} for k, v in ex.response_headers],
            "content": resp,
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": len(ex.response_body),
        },
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "ssl": -1,
            "send": 0,
            "wait": round(wait, 3),
            "receive": round(max(0.0, total - wait), 3),
        },
        "_ctxscope": dict(fields, capture_epoch=e.capture_epoch, analysis=e.analysis),
    }


def har_log(entries: list[dict], version: str) -> dict:
    return {
        "log": {"version": "1.2", "creator": {"name": "ctxscope", "version": version}, "pages": [], "entries": entries}
    }


# -- reading ---------------------------------------------------------------------------------------


def _body(part: dict, field: str) -> tuple[bytes, bool]:
    """(bytes, decoded): ``_wire`` when there, else ``text`` (base64 when said so)."""
    if part.get("_wire"):
        return base64.b64decode(part["_wire"], validate=True), False
    text = part.get(field) or ""
    if part.get("encoding") == "base64" or part.get("_encoding") == "base64":
        return base64.b64decode(text, validate=True), True
    return str(text).encode("utf-8"), True


def _pairs(items: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(h["name"]), str(h["value"])) for h in items or () if isinstance(h, dict) and "name" in h)


def _upstream(url: str) -> tuple[str, str, str]:
    """(upstream, path, query) of a foreign entry's URL: the upstream is only what the file said
    (an imported call's route comes from its path and body: ``share/imported.py``)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.path, parts.query


def exchange_from_entry(entry: dict, n: int, label: str | None) -> tuple[Exchange, int | None]:
    """An entry as an Exchange (and its capture epoch when ctxscope wrote it); BadExport if malformed."""
    try:
        request, response = entry["request"], entry["response"]
        req_body, req_decoded = _body(request.get("postData") or {}, "text")
        resp_body, resp_decoded = _body(response.get("content") or {}, "text")
        req_headers, resp_headers = _pairs(request.get("headers")), _pairs(response.get("headers"))
        if req_decoded:  # the text is decoded: a Content-Encoding would now be a lie
            req_headers = tuple(p for p in req_headers if p[0].lower() != "content-encoding")
        if resp_decoded:
            resp_headers = tuple(p for p in resp_headers if p[0].lower() != "content-encoding")
        ours = entry.get("_ctxscope")
        if isinstance(ours, dict):
            fields = dict(
                ours,
                method=request["method"],
                status=response.get("status") or None,
                request_headers=req_headers,
                response_headers=resp_headers,
                request_body=base64.b64encode(req_body).decode(),
                response_body=base64.b64encode(resp_body).decode(),
            )
            epoch = ours.get("capture_epoch")
            return mark_imported(exchange_from_fields(fields), "har"), int(epoch) if epoch is not None else None
        started = datetime.fromisoformat(str(entry["startedDateTime"]).replace("Z", "+00:00")).timestamp()
        total = float(entry.get("time") or 0) / 1000.0
        wait = (entry.get("timings") or {}).get("wait")
        upstream, path, query = _upstream(str(request["url"]))
        status = int(response.get("status") or 0) or None
        return mark_imported(
            Exchange(
                id=f"har{int(started * 1e6):016x}{n:06x}",
                provider=UNKNOWN,
                upstream=upstream,
                method=str(request["method"]),
                path=path,
                query=query,
                session_label=label,
                annotations=(),
                request_headers=req_headers,
                key_fingerprint=None,
                request_body=req_body,
                status=status,
                response_headers=resp_headers,
                response_body=resp_body,
                started_at=started,
                first_byte_at=started + float(wait) / 1000.0 if isinstance(wait, (int, float)) and wait >= 0 else None,
                ended_at=started + total,
                outcome="ok" if status else "upstream_unreachable",
                client=_header(req_headers, "user-agent"),
            ),
            "har",
        ), None
    except (BadExport, BadImport) as exc:
        raise BadExport(f"HAR entry {n}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadExport(f"HAR entry {n}: {type(exc).__name__}: {exc}") from exc


def har_analysis(entry: dict) -> dict | None:
    """The analysis ctxscope wrote in an entry (``_ctxscope.analysis``), to check the import's against."""
    ours = entry.get("_ctxscope")
    analysis = ours.get("analysis") if isinstance(ours, dict) else None
    return analysis if isinstance(analysis, dict) else None
