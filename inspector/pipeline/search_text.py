"""The searchable texts of a call, and reading them back from the stored bodies.

The indexer takes a prompt's canonical segments and a final response's texts (``prompt_pieces``,
``response_pieces``); the store keeps no copy of them, only where one occurs (call, body, JSON
Pointer). ``SegmentTexts`` reads a segment's text back by the same extraction from that stored
body (a stream's final response is parsed again from the stored stream), for FTS5's snippets, the
phrase check and the terms FTS5 deletes with a segment (docs/architecture.md, "The search index").
Whoever opens a connection that reads search texts passes ``SegmentTexts`` to it (``store/db.py``:
``segment_texts``).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from ctxscope.inspector.analyses.canonical_prompt import canonical_json
from ctxscope.inspector.analyses.incremental import Prepared, prepare
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived.search import Piece, occurrence_of, segment_key
from ctxscope.vocab.kinds import SearchArea

log = logging.getLogger("ctxscope.search")

CALLS_CACHED = 64  # a search page shows 50 hits: its calls' texts are extracted once
TEXT_CACHED = 8 << 20  # ... unless they hold more than this many characters (a 370K-token prompt is ~1.5M)

AREA_OF_KIND = {
    "system": SearchArea.SYSTEM,
    "tools": SearchArea.TOOLS,
    "tool_result": SearchArea.TOOL_RESULTS,
    "user_text": SearchArea.MESSAGES,
    "assistant_text": SearchArea.MESSAGES,
    "tool_call": SearchArea.MESSAGES,
    "reminder": SearchArea.MESSAGES,
    "thinking": SearchArea.MESSAGES,
    "other": SearchArea.MESSAGES,
    "image": SearchArea.MESSAGES,
}
_RESPONSE_TEXT_KEYS = frozenset({"text", "content", "thinking", "refusal", "arguments", "output"})
_RESPONSE_JSON_KEYS = frozenset({"input"})  # a tool call's arguments as an object


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def response_pieces(response: Any) -> list[Piece]:
    """The texts of a final response object, each with its JSON Pointer into that object."""
    out: list[Piece] = []

    def add(pointer: str, text: str) -> None:
        if text.strip():
            out.append(Piece(SearchArea.RESPONSES, "response", pointer, text))

    def walk(value: Any, pointer: str, depth: int) -> None:
        # Only containers are walked into: a scalar holds no text but a text key's (every stored call
        # goes through here, and most of a response's values are scalars).
        if depth > 64:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str):
                    if key in _RESPONSE_TEXT_KEYS:
                        add(f"{pointer}/{_escape(str(key))}", item)
                elif isinstance(item, dict) and key in _RESPONSE_JSON_KEYS:
                    add(f"{pointer}/{_escape(str(key))}", canonical_json(item))
                elif isinstance(item, (dict, list)):
                    walk(item, f"{pointer}/{_escape(str(key))}", depth + 1)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, (dict, list)):
                    walk(item, f"{pointer}/{i}", depth + 1)

    walk(response, "", 0)
    return out


def prompt_pieces(prepared: Prepared | None, *, reused: bool = False) -> list[Piece]:
    """The prompt's canonical segments that hold text (an image alone has none to search); with
    ``reused``, only those outside the leading items ``prepare`` took from the previous call."""
    if prepared is None:
        return []
    segments = list(prepared.prompt.segments)
    if reused and prepared.reused_items and prepared.starts:
        first_new = prepared.head + prepared.starts[prepared.reused_items]
        segments = segments[: prepared.head] + segments[first_new:]
    return [
        Piece(AREA_OF_KIND.get(seg.kind, SearchArea.MESSAGES), "request", seg.pointer, seg.text)
        for seg in segments
        if seg.text.strip()
    ]


class SegmentTexts:
    """One connection's reader of segment texts (not thread-safe: a connection is used by one thread).

    A segment is read from one of its occurrences: the call's body is loaded and split as the indexer
    split it, and all that body's texts are kept (the last ``CALLS_CACHED`` bodies, at most
    ``TEXT_CACHED`` characters but always the last one), so the hits of one call cost one load. A
    text whose key does not match the segment's (a body that changed meaning, say a newer
    canonicalisation) reads as NULL rather than as another text.
    """

    def __init__(self, db: Db, calls: int = CALLS_CACHED, chars: int = TEXT_CACHED) -> None:
        self.db = db
        self.calls = calls
        self.chars = chars
        self._texts: OrderedDict[tuple[str, str], tuple[dict[str, str], int]] = OrderedDict()
        self._held = 0  # characters in _texts
        self._last: Prepared | None = None  # the last prompt split: the next call's re-sends its leading items

    def __call__(self, segment: int) -> str | None:
        where = occurrence_of(self.db, segment)
        if where is None:
            return None
        key, call_id, api, body, pointer = where
        text = self.texts(call_id, api, body).get(pointer)
        if text is None or segment_key(text) != key:
            log.warning("search segment %s: no matching text at %s of call %s", segment, pointer, call_id)
            return None
        return text

    def texts(self, call_id: str, api: str | None, body: str) -> dict[str, str]:
        """Pointer -> text of a call's request or final response, as indexed."""
        key = (call_id, body)
        found = self._texts.get(key)
        if found is not None:
            self._texts.move_to_end(key)
            return found[0]
        pieces = self._request(call_id, api) if body == "request" else _response(self.db, call_id)
        texts = {p.pointer: p.text for p in pieces}
        size = sum(len(t) for t in texts.values())
        self._texts[key] = (texts, size)
        self._held += size
        while len(self._texts) > 1 and (len(self._texts) > self.calls or self._held > self.chars):
            self._held -= self._texts.popitem(last=False)[1][1]
        return texts

    def _request(self, call_id: str, api: str | None) -> list[Piece]:
        """The prompt's segments, split as the indexer split them; the leading items the last prompt
        split holds byte for byte are reused, as the analysis does (a session read call after call,
        when its index is cleared, splits each body's new items only)."""
        raw = queries.get_request_body(self.db, call_id)
        try:
            parsed = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            return []
        prepared = prepare(api, parsed, raw, [self._last] if self._last is not None else [])[0]
        if prepared is not None and prepared.reusable:
            self._last = prepared
        return prompt_pieces(prepared)


def _response(db: Db, call_id: str) -> list[Piece]:
    try:
        return response_pieces(queries.get_final_response(db, call_id))
    except Exception:  # an unparseable response was indexed as nothing
        return []
