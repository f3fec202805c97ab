"""Calls loaded from a file are marked, and their API is read from their path and body, never their host.

A file someone hands over names any upstream it likes. An imported call's route (``anthropic``,
``openai``, ``gemini``) is the API its request path and body speak, or ``unknown``; its stored
upstream is kept only as what the file said. ``curl`` and replay of an imported call target the
daemon's route for that API, and an ``unknown`` call gets no key at all (docs/architecture.md,
"Imported calls choose no host"). The checks here also bound what the file may put in an id or
a label, so nothing it names is stored unchecked.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.apis import detect_api
from ctxscope.proxy.wire.decoding import BodyDecodeError, decode_body
from ctxscope.vocab.apis import Api
from ctxscope.vocab.headers import Annotation

IMPORTED = Annotation.IMPORTED.value  # the annotation every imported call carries: its file's format
UNKNOWN = "unknown"
ROUTES = ("anthropic", "openai", "gemini")  # the daemon's provider routes an imported call may target
CALL_ID = re.compile(r"[A-Za-z0-9_-]{8,128}")
MAX_LABEL = 200
_SHAPE_MAX = 64 << 20  # a compressed request body is decoded to look at its shape up to this size


class BadImport(ValueError):
    """An imported call that names something ctxscope will not store (an id, a label). Not a
    ``BadExport``: this module stays light, for the writer child imports it (through ``curl``);
    the readers turn it into one."""


def _fields(body: bytes, encoding: str | None) -> dict:
    try:
        data = decode_body(body, encoding, _SHAPE_MAX) if encoding else body
        doc = json.loads(data)
    except (BodyDecodeError, ValueError, RecursionError):  # not JSON, or too deep to be a request
        return {}
    return doc if isinstance(doc, dict) else {}


def api_route(method: str, path: str, body: bytes, encoding: str | None = None) -> str:
    """The daemon route whose API this request speaks: by its path and the fields of its body."""
    api = detect_api(method, path)
    if api is None:
        return UNKNOWN
    doc = _fields(body, encoding)
    messages = isinstance(doc.get("messages"), list)
    if api == Api.ANTHROPIC_MESSAGES and messages and isinstance(doc.get("max_tokens"), int):
        return "anthropic"
    if api == Api.ANTHROPIC_COUNT_TOKENS and messages:
        return "anthropic"
    if api == Api.OPENAI_CHAT and messages and isinstance(doc.get("model"), str):
        return "openai"
    if api == Api.OPENAI_RESPONSES and isinstance(doc.get("model"), str) and "input" in doc:
        return "openai"
    if api == Api.GEMINI_GENERATE and isinstance(doc.get("contents"), list):
        return "gemini"
    return UNKNOWN


def check_id(call_id: str) -> str:
    if not CALL_ID.fullmatch(call_id):
        shown = call_id[:40] + ("..." if len(call_id) > 40 else "")
        raise BadImport(f"call id {shown!r} is not 8 to 128 letters, digits, '-' or '_'")
    return call_id


def check_label(label: str | None) -> str | None:
    if label is not None and (len(label) > MAX_LABEL or not label.isprintable()):
        raise BadImport(f"session label is over {MAX_LABEL} characters or holds control characters")
    return label


def mark_imported(ex: Exchange, source: str) -> Exchange:
    """``ex`` checked, with its route read from its request and the ``IMPORTED`` mark (any mark
    the file carried replaced). BadImport when its id or label is not one ctxscope stores."""
    check_id(ex.id)
    label = ex.session_label if isinstance(ex.session_label, str) or ex.session_label is None else None
    check_label(label)
    encoding = ex.header("content-encoding")
    route = api_route(ex.method, ex.path, ex.request_body, encoding)
    notes = tuple(p for p in ex.annotations if p[0].lower() != IMPORTED) + ((IMPORTED, source),)
    return replace(ex, provider=route, session_label=label, annotations=notes)


def is_marked(ex: Exchange) -> bool:
    """Whether an Exchange carries the ``IMPORTED`` mark already."""
    return any(k.lower() == IMPORTED for k, _ in ex.annotations)


def is_imported(call: dict) -> bool:
    """Whether a stored call (a row of ``queries.get_call``) came from a file."""
    return any(
        isinstance(p, (list, tuple)) and len(p) == 2 and str(p[0]).lower() == IMPORTED
        for p in call.get("annotations") or ()
    )
