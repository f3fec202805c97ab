"""The call page's data: the row, the outlines of the request and final response, one node of
either by pointer (``body_node``), and raw bytes in ranges.

The outlines (``bodytree.py``) carry the structure and short previews, never whole bodies, so the
first load of a 4M-token call stays under 1 MB; a block's text comes by pointer when the page opens it.

Raw bodies can be many megabytes, so the page never gets them whole: it asks for ranges (the UI
loads 64 KiB at a time and keeps only what the user scrolled to). A body is rebuilt from its
delta chain once and kept in a small LRU so paging through it is cheap.

Keys a client put inside a body are stored with it (bodies are byte-exact). The cache holds the
body with them masked length for length, before any range is cut, so a key across a range
boundary is masked too and offsets stay the stored body's. The outlines and nodes are cut from
a parsed body masked whole first, for the same reason; a download masks unless the exact bytes
are asked for.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import sqlite_utils

from ctxscope.inspector.analyses.cache.provider_agreement import diagnosis_sentence
from ctxscope.inspector.share.bodies import BodyExport, export_body
from ctxscope.inspector.store import queries as q
from ctxscope.inspector.store.columns import call_columns
from ctxscope.inspector.store.views import neighbours
from ctxscope.proxy.redaction.mask import mask_key_bytes, mask_keys_in
from ctxscope.vocab.kinds import RelationKind
from ctxscope.web import bodytree
from ctxscope.web.fields import ANALYSIS_COLUMNS, client_name, normalise_call
from ctxscope.web.jsondiff import first_change

MAX_STRUCTURED = 32 * 2**20  # bigger request bodies are shown raw only
RANGE_DEFAULT = 64 * 1024
RANGE_MAX = 1024 * 1024
_HIDDEN = ("request_blob", "response_blob", "final_response_blob", "request_recode", "response_recode")


class BodyCache:
    """Rebuilt bodies by (call id, kind, form), keys masked, bounded in bytes."""

    def __init__(self, max_bytes: int = 64 * 2**20):
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, db: sqlite_utils.Database, call_id: str, kind: str, form: str) -> bytes | None:
        key = (call_id, kind, form)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        data = _load(db, call_id, kind, form)
        if data is None or len(data) > self.max_bytes // 2:
            return data
        with self._lock:
            if key not in self._items:
                self._items[key] = data
                self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old)
        return data

    def clear(self) -> None:
        """Forget every body (the read pool went idle: docs/architecture.md, "Memory")."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


def _load(db: sqlite_utils.Database, call_id: str, kind: str, form: str) -> bytes | None:
    if kind == "request":
        data = q.get_request_raw(db, call_id) if form == "wire" else q.get_request_body(db, call_id)
    else:
        data = q.get_response_raw(db, call_id) if form == "wire" else q.get_response_body(db, call_id)
    return None if data is None else mask_key_bytes(data)


def _neighbours(db: sqlite_utils.Database, row: dict) -> dict:
    prev, nxt = neighbours(db, row["session"], row["seq"])
    return {"previous": prev, "next": nxt}


def _thread_role(db: sqlite_utils.Database, row: dict) -> None:
    """The call's thread as the session page and the CLI name it: main or side, its number, its parent."""
    roles = {t["thread"]: t for top in q.session_threads(db, row["session"]) for t in (top, *top["children"])}
    role = roles.get(row.get("thread"))
    row["thread_index"] = role["index"] if role else None
    row["thread_main"] = role["main"] if role else None
    row["parent_thread"] = role["parent_thread"] if role else row.get("parent_thread")


def _changed_region(db: sqlite_utils.Database, row: dict, request: object) -> dict | None:
    """A break's changed region against the predecessor: the first change at the analysed pointer
    (or the nearest node above it both bodies have), cut to a window (``jsondiff.window``)."""
    pointer, pred = row.get("pointer"), row.get("predecessor")
    if row.get("relation") != RelationKind.DIVERGED or not isinstance(pointer, str) or not pred or request is None:
        return None
    old = _masked_request(db, pred)
    if old is None:
        return None
    while True:
        try:
            new_value, old_value = bodytree.resolve(request, pointer), bodytree.resolve(old, pointer)
            break
        except (bodytree.BadPointer, bodytree.NoNode):
            if not pointer:
                return None
            pointer = pointer.rsplit("/", 1)[0]
    return first_change(old_value, new_value, pointer)


def _masked_request(db: sqlite_utils.Database, call_id: str) -> object:
    """The parsed request with every key masked before anything is cut from it: a preview or a page
    never ends inside a key, and the outline's sizes are the pages' (``node`` reads it the same way)."""
    return mask_keys_in(q.get_request_json(db, call_id))


def _masked_response(db: sqlite_utils.Database, call_id: str) -> object:
    try:
        return mask_keys_in(q.get_final_response(db, call_id))
    except (ValueError, KeyError):
        return None


def call_detail(db: sqlite_utils.Database, call_id: str) -> dict | None:
    """Everything the call page shows except raw bytes; None for an unknown id."""
    row = q.get_call(db, call_id)
    if row is None:
        return None
    for key in _HIDDEN:
        row.pop(key, None)
    cols = call_columns(db)
    for key in ANALYSIS_COLUMNS:
        if key in cols:
            row.setdefault(key, None)
    row = normalise_call(row)
    row["client_name"] = client_name(row.get("client"))
    if isinstance(row.get("cache"), dict):  # the provider's diagnosis in words, beside our verdict
        row["cache"]["provider_sentence"] = diagnosis_sentence(row["cache"])
    _thread_role(db, row)
    size = row.get("request_bytes") or 0
    request, note = None, None
    if size > MAX_STRUCTURED:
        note = f"request body is {size} bytes: shown raw only"
    else:
        request = _masked_request(db, row["id"])
        if request is None and size:
            note = "request body is not JSON (or could not be decoded): see the raw bytes"
    response = _masked_response(db, row["id"]) if (row.get("response_bytes") or 0) <= MAX_STRUCTURED else None
    region = _changed_region(db, row, request)
    req_outline = bodytree.outline(request) if request is not None else None
    resp_outline = bodytree.outline(response) if response is not None else None
    del request, response  # the whole bodies go no further than their outlines
    nav = _neighbours(db, row)
    predecessor = (
        row.get("predecessor") if row.get("predecessor") and q.resolve_call_id(db, row["predecessor"]) else None
    )
    predecessor = predecessor or nav["previous"]
    return {
        "call": row,
        "request": req_outline.tree if req_outline else None,
        "request_outline": req_outline.as_dict() if req_outline else None,
        "request_note": note,
        "changed_region": region,
        "response": resp_outline.tree if resp_outline else None,
        "response_outline": resp_outline.as_dict() if resp_outline else None,
        "navigation": nav,
        "diff_base": predecessor,
        "diff_base_is_predecessor": predecessor is not None and predecessor == row.get("predecessor"),
    }


def body_node(
    db: sqlite_utils.Database,
    call_id: str,
    kind: str,
    pointer: str,
    offset: int,
    limit: int,
    start: int | None,
) -> dict | None:
    """One node of a call's request or final response, keys masked; None for an unknown call.

    ``bodytree.BadPointer`` / ``bodytree.NoNode`` for a pointer that is malformed or names nothing."""
    full = q.resolve_call_id(db, call_id)
    if full is None:
        return None
    body = _masked_request(db, full) if kind == "request" else _masked_response(db, full)
    if body is None:
        raise bodytree.NoNode(f"the {kind} of this call is not JSON: see the raw bytes")
    return bodytree.node(body, pointer, offset, limit, start)


def _cut(data: bytes, start: int, end: int) -> int:
    """Move ``end`` back so a UTF-8 sequence is not split (at most 3 bytes)."""
    if end >= len(data):
        return len(data)
    back = end
    while back > start and back > end - 4 and (data[back] & 0xC0) == 0x80:
        back -= 1
    return back if back > start else end


def _hexdump(data: bytes, base: int) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{base + i:08x}  {hexes:<47}  {text}")
    return "\n".join(lines) + ("\n" if lines else "")


def raw_range(
    db: sqlite_utils.Database, cache: BodyCache, call_id: str, kind: str, form: str, offset: int, length: int
) -> dict | None:
    """Bytes [offset, offset+length) of a body as text (a hex dump when they are not UTF-8)."""
    full = q.resolve_call_id(db, call_id)
    if full is None:
        return None
    data = cache.get(db, full, kind, form)
    if data is None:
        return {"total": None, "offset": 0, "next_offset": None, "text": "", "binary": False, "undecodable": True}
    offset = max(0, min(offset, len(data)))
    length = max(1, min(length, RANGE_MAX))
    end = _cut(data, offset, offset + length)
    chunk = data[offset:end]
    try:
        text, binary = chunk.decode("utf-8"), False
    except UnicodeDecodeError:
        text, binary = _hexdump(chunk, offset), True
    return {
        "total": len(data),
        "offset": offset,
        "next_offset": end if end < len(data) else None,
        "text": text,
        "binary": binary,
        "undecodable": False,
    }


def raw_bytes(db: sqlite_utils.Database, call_id: str, kind: str, form: str, exact: bool = False) -> BodyExport | None:
    """A body for download: keys masked (see ``inspector/share/bodies.py``), or the exact bytes when asked."""
    full = q.resolve_call_id(db, call_id)
    return None if full is None else export_body(db, full, kind, form, exact=exact)
