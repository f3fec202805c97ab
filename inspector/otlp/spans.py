"""A stored call as an OpenTelemetry span: GenAI semantic conventions plus what only ctxscope knows.

Ids derive from the call id (docs/architecture.md, "Export to OpenTelemetry"): the same call
always becomes the same span, so a resend after an outage is a duplicate a backend can drop.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ctxscope.inspector.analyses.cache.provider_agreement import diagnosis_words
from ctxscope.proxy.redaction.mask import mask_keys_in

SCOPE = InstrumentationScope("ctxscope", "1")
_SYSTEMS = {"anthropic": "anthropic", "openai": "openai", "gemini": "gcp.gemini"}
_OPERATIONS = {
    "anthropic.messages": "chat",
    "openai.chat": "chat",
    "openai.responses": "chat",
    "gemini.generate": "generate_content",
    "anthropic.count_tokens": "count_tokens",
}

# Longest content attribute: a batch of calls with huge prompts stays under what collectors accept.
CONTENT_CAP = 128 * 1024


def span_id(call_id: str) -> int:
    """A non-zero 64-bit id from the call id: stable across resends and restarts."""
    return int.from_bytes(hashlib.sha256(b"span:" + call_id.encode()).digest()[:8], "big") or 1


def trace_id(call_id: str) -> int:
    """Each call is a trace of its own; the session is ``gen_ai.conversation.id``."""
    return int.from_bytes(hashlib.sha256(b"trace:" + call_id.encode()).digest()[:16], "big") or 1


def _ns(iso: str | None) -> int | None:
    if not iso:
        return None
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _attributes(row: dict[str, Any], response_model: str | None) -> dict[str, Any]:
    api = row.get("api") or ""
    family = api.split(".", 1)[0]
    markers = row.get("markers")
    try:
        kinds = [m["kind"] for m in json.loads(markers) if isinstance(m, dict) and "kind" in m] if markers else []
    except (ValueError, TypeError):
        kinds = []
    cache = row.get("cache")
    if isinstance(cache, str):
        try:
            cache = json.loads(cache)
        except ValueError:
            cache = None
    cache = cache if isinstance(cache, dict) else {}
    diagnosis = diagnosis_words(cache.get("provider_diagnostics"))
    values: dict[str, Any] = {
        "gen_ai.system": _SYSTEMS.get(family, family or row.get("provider")),
        "gen_ai.provider.name": _SYSTEMS.get(family, family or row.get("provider")),
        "gen_ai.operation.name": _OPERATIONS.get(api, "chat"),
        "gen_ai.request.model": row.get("model"),
        "gen_ai.response.model": response_model,
        "gen_ai.usage.input_tokens": row.get("usage_input"),
        "gen_ai.usage.output_tokens": row.get("usage_output"),
        "gen_ai.usage.cache_read.input_tokens": row.get("usage_cache_read"),
        "gen_ai.usage.cache_creation.input_tokens": row.get("usage_cache_write"),
        "gen_ai.response.finish_reasons": [row["stop_reason"]] if row.get("stop_reason") else None,
        "gen_ai.conversation.id": row.get("session"),
        "ctxscope.call_id": row["id"],
        "ctxscope.thread": row.get("thread"),
        "ctxscope.seq": row.get("seq"),
        "ctxscope.relation": row.get("relation"),
        "ctxscope.pointer": row.get("pointer"),
        "ctxscope.epoch_reason": row.get("epoch_reason"),
        "ctxscope.cache.verdict": row.get("cache_verdict"),
        "ctxscope.cache.tokens_lost": row.get("cache_lost_tokens"),
        "ctxscope.provider_cache_diagnosis": diagnosis,
        "ctxscope.provider_cache_diagnosis.agreement": (cache.get("provider_agreement") or "none")
        if diagnosis
        else None,
        "ctxscope.markers": kinds,
        "ctxscope.grouped_by": row.get("grouped_by"),
        "ctxscope.api": api or None,
        "ctxscope.provider": row.get("provider"),
        "ctxscope.outcome": row.get("outcome"),
        "http.request.method": row.get("method"),
        "http.response.status_code": row.get("status"),
        "url.path": row.get("path"),
    }
    return {k: v for k, v in values.items() if v is not None}


def _capped(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= CONTENT_CAP else text[:CONTENT_CAP] + f"... [{len(text) - CONTENT_CAP} more characters]"


def _content_events(request: Any, response: Any, at: int | None) -> list[Event]:
    """The prompt and the answer as GenAI events, keys masked as every export masks them."""
    events = []
    if request is not None:
        request = mask_keys_in(request)
        system = request.get("system", request.get("instructions")) if isinstance(request, dict) else None
        messages = request.get("messages", request.get("input")) if isinstance(request, dict) else request
        attrs = {"gen_ai.input.messages": _capped(messages)}
        if system is not None:
            attrs["gen_ai.system_instructions"] = _capped(system)
        events.append(Event("gen_ai.content.prompt", attrs, at))
    if response is not None:
        response = mask_keys_in(response)
        output = response
        if isinstance(response, dict):
            output = response.get("content", response.get("choices", response.get("output", response)))
        events.append(Event("gen_ai.content.completion", {"gen_ai.output.messages": _capped(output)}, at))
    return events


def call_span(
    row: dict[str, Any], resource: Resource, response: Any = None, request: Any = None, content: bool = False
) -> ReadableSpan:
    """The span of one stored call. ``response`` is its final response object (for the response
    model; its content only when ``content``), ``request`` its parsed request body (``content`` only)."""
    start = _ns(row.get("started_at"))
    end = _ns(row.get("ended_at")) or start
    response_model = response.get("model") if isinstance(response, dict) else None
    events = []
    first = _ns(row.get("first_byte_at"))
    if first is not None:
        events.append(Event("gen_ai.first_token", {"ctxscope.ttfb_ms": row.get("ttfb_ms") or 0.0}, first))
    if content:
        events += _content_events(request, response, end)
    failed = row.get("outcome") not in (None, "ok")
    status = Status(StatusCode.ERROR, row.get("error") or row.get("outcome")) if failed else Status(StatusCode.UNSET)
    operation = _OPERATIONS.get(row.get("api") or "", "chat")
    return ReadableSpan(
        name=f"{operation} {row.get('model') or ''}".strip(),
        context=SpanContext(
            trace_id(row["id"]), span_id(row["id"]), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        ),
        resource=resource,
        attributes=_attributes(row, response_model),
        events=events,
        kind=SpanKind.CLIENT,
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=SCOPE,
    )
