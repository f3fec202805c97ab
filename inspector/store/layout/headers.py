"""Header lists stored once: a call row points at a shared header set and keeps only what varies.

A client sends the same request headers on every call, and a provider's responses differ only in
a few values (date, request id, rate-limit counters, content length). A header list is split into
a *set* (the names and the stable values, with ``null`` where a volatile value was), stored once
in ``header_sets`` by its hash, and the volatile values in order, kept in the call row. Joining
them gives back the exact list (docs/architecture.md, "Body storage").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, cast

from ctxscope.inspector.base import json_text
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.layout.known import KnownIds

_VOLATILE = frozenset(
    {
        "date",
        "content-length",
        "request-id",
        "x-request-id",
        "cf-ray",
        "x-envoy-upstream-service-time",
        "openai-processing-ms",
        "set-cookie",
        "expires",
        "last-modified",
        "etag",
        "x-amzn-requestid",
        "x-goog-request-id",
        "server-timing",
        "age",
    }
)
_VOLATILE_PREFIXES = ("anthropic-ratelimit-", "x-ratelimit-", "ratelimit-")


_COMPACT = json_text.encoder()  # built once, not per call


def _volatile(name: str) -> bool:
    low = name.lower()
    return low in _VOLATILE or low.startswith(_VOLATILE_PREFIXES)


Shape = tuple[tuple[str, str | None], ...]


def _split(pairs: Sequence[Sequence[str]]) -> tuple[Shape, list[str]]:
    shape: list[tuple[str, str | None]] = []
    values: list[str] = []
    for name, value in pairs:
        if _volatile(name):
            shape.append((name, None))
            values.append(value)
        else:
            shape.append((name, value))
    return tuple(shape), values


def split(pairs: Sequence[Sequence[str]]) -> tuple[str, list[str]]:
    """The set (compact JSON, volatile values as null) and the volatile values in order."""
    shape, values = _split(pairs)
    return _COMPACT(shape), values


def join(shape_json: str, values: Sequence[str]) -> list[list[str]]:
    """The exact header list back from its set and volatile values."""
    it = iter(values)
    return [[name, next(it, "") if value is None else value] for name, value in json.loads(shape_json)]


def _put_shape(db: Db, shape: Shape, known: KnownIds | None) -> int:
    """The id of the header set ``shape``; ``known``: the writer's ids, asked before its JSON is made."""
    if known is None:
        return put(db, _COMPACT(shape))
    found = known.header_sets.get(shape)
    if found is None:
        found = put(db, _COMPACT(shape))
        known.keep(known.header_sets, shape, found)
    return found


def put(db: Db, shape_json: str) -> int:
    """The id of the header set (stored now if new)."""
    digest = hashlib.blake2b(shape_json.encode(), digest_size=16).digest()
    row = db.execute("SELECT id FROM header_sets WHERE hash = ?", [digest]).fetchone()
    if row is not None:
        return cast("int", row[0])
    cur = db.execute("INSERT INTO header_sets (hash, pairs) VALUES (?, ?)", [digest, shape_json])
    assert cur.lastrowid is not None
    return cur.lastrowid


def store_pairs(db: Db, row: dict[str, Any], known: KnownIds | None = None) -> None:
    """Move a row's ``request_headers``/``response_headers`` (pair lists, or their JSON text) into header sets."""
    values: list[list[str]] = []
    for kind in ("request", "response"):
        pairs = row.pop(f"{kind}_headers", None)
        if pairs is None:
            row[f"{kind}_header_set"] = None
            values.append([])
            continue
        shape, volatile = _split(json.loads(pairs) if isinstance(pairs, str) else pairs)
        row[f"{kind}_header_set"] = _put_shape(db, shape, known)
        values.append(volatile)
    row["header_values"] = _COMPACT(values) if any(values) else None


def load_pairs(db: Db, row: dict[str, Any]) -> None:
    """Fill a read row's ``request_headers``/``response_headers`` (JSON text) from its header sets."""
    sets = {k: row.pop(f"{k}_header_set", None) for k in ("request", "response")}
    packed = row.pop("header_values", None)
    if sets["request"] is None and sets["response"] is None:
        return
    values = json.loads(packed) if packed else [[], []]
    for i, kind in enumerate(("request", "response")):
        if sets[kind] is None:
            continue
        found = db.execute("SELECT pairs FROM header_sets WHERE id = ?", [sets[kind]]).fetchone()
        pairs = join(found[0], values[i]) if found else []
        row[f"{kind}_headers"] = json.dumps(pairs, ensure_ascii=False)


def sweep(db: Db) -> int:
    """Delete the header sets no call uses any more."""
    return db.execute(
        """DELETE FROM header_sets WHERE id NOT IN (
             SELECT request_header_set FROM calls WHERE request_header_set IS NOT NULL
             UNION SELECT response_header_set FROM calls WHERE response_header_set IS NOT NULL)"""
    ).rowcount
