"""Body storage that grows with new content, not with calls x context size.

An agent re-sends its whole history on every call, so consecutive request bodies of a session
share a long byte prefix (and usually a suffix: tools, parameters). Each body is stored either as
a *keyframe* (the whole body, zstd-compressed) or as a *delta* against an earlier body: the
lengths of the prefix and suffix it shares with that base, plus the zstd-compressed middle.
Chains are capped (``MAX_DEPTH``) so reading a body back costs at most that many small
decompressions; a SHA-256 per blob lets every read verify the bytes are exactly the ones stored.

Pure helpers (``common_prefix``, ``make_delta``, ``apply_delta``) plus thin SQLite I/O
(``blob_put``, ``blob_get``, ``blob_load``) on the ``blobs`` table created by migrations.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import sqlite_utils

try:  # Python 3.14+
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the interpreter
    from backports import zstd

MAX_DEPTH = 32  # deltas in a row before a fresh keyframe
MIN_DELTA_SIZE = 256  # smaller bodies are always keyframes: a chain would not pay for itself
ZSTD_LEVEL = 3


class BlobCorrupt(RuntimeError):
    """A stored blob does not reproduce the bytes it was stored from."""


@dataclass(frozen=True)
class StoredBlob:
    """A blob as the writer remembers it, so the next body can be stored as a delta against it."""

    id: int
    data: bytes
    depth: int  # 0 for a keyframe, else 1 + the base's depth


@dataclass(frozen=True)
class Delta:
    prefix_len: int
    suffix_len: int
    middle: bytes


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix: bisection with memcmp on zero-copy slices (about 2n bytes compared)."""
    n = min(len(a), len(b))
    mb = memoryview(b)
    if a.startswith(mb[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a.startswith(mb[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[lo] == b[lo]:
        lo += 1
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix, at most ``limit`` (the same bisection from the end)."""
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    la, lb, mb = len(a), len(b), memoryview(b)
    if a.startswith(mb[lb - n :], la - n):
        return n
    lo, hi = 0, n  # the last lo bytes agree, the last hi do not
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a.startswith(mb[lb - mid : lb - lo], la - mid):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[la - lo - 1] == b[lb - lo - 1]:
        lo += 1
    return lo


def make_delta(base: bytes, new: bytes) -> Delta:
    """``new`` as the prefix and suffix it shares with ``base`` plus the bytes in between."""
    p = common_prefix(base, new)
    s = common_suffix(base, new, min(len(base), len(new)) - p)
    return Delta(p, s, new[p : len(new) - s])


def apply_delta(base: bytes, delta: Delta) -> bytes:
    tail = base[len(base) - delta.suffix_len :] if delta.suffix_len else b""
    return base[: delta.prefix_len] + delta.middle + tail


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def choose_base(
    data: bytes, bases: Iterable[StoredBlob], max_depth: int = MAX_DEPTH
) -> tuple[StoredBlob, Delta] | None:
    """The candidate base giving the smallest middle, or None when a keyframe is the better deal."""
    if len(data) < MIN_DELTA_SIZE:
        return None
    best: tuple[StoredBlob, Delta] | None = None
    for base in bases:
        if base.depth >= max_depth:
            continue
        delta = make_delta(base.data, data)
        if best is None or len(delta.middle) < len(best[1].middle):
            best = (base, delta)
    # A delta must save at least half the body, else a keyframe costs little more and resets the chain.
    if best is None or len(best[1].middle) * 2 > len(data):
        return None
    return best


def blob_put(
    db: sqlite_utils.Database,
    data: bytes,
    bases: Iterable[StoredBlob] = (),
    *,
    max_depth: int = MAX_DEPTH,
) -> StoredBlob:
    """Store ``data`` (deduplicated by hash, else as a delta against the best base or a keyframe)."""
    digest = sha256(data)
    row = db.execute("SELECT id, depth FROM blobs WHERE sha256 = ? AND size = ?", [digest, len(data)]).fetchone()
    if row is not None:
        return StoredBlob(row[0], data, row[1])
    choice = choose_base(data, bases, max_depth)
    if choice is None:
        base_id, depth, prefix_len, suffix_len, payload = None, 0, 0, 0, data
    else:
        base, delta = choice
        base_id, depth = base.id, base.depth + 1
        prefix_len, suffix_len, payload = delta.prefix_len, delta.suffix_len, delta.middle
    cur = db.execute(
        "INSERT INTO blobs (sha256, size, base, depth, prefix_len, suffix_len, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [digest, len(data), base_id, depth, prefix_len, suffix_len, zstd.compress(payload, ZSTD_LEVEL)],
    )
    assert cur.lastrowid is not None  # an INSERT sets it
    return StoredBlob(cur.lastrowid, data, depth)


_CHAIN_SQL = """
WITH RECURSIVE chain(id, base, prefix_len, suffix_len, data, sha256, size, depth, n) AS (
  SELECT id, base, prefix_len, suffix_len, data, sha256, size, depth, 0 FROM blobs WHERE id = ?
  UNION ALL
  SELECT b.id, b.base, b.prefix_len, b.suffix_len, b.data, b.sha256, b.size, b.depth, c.n + 1
  FROM blobs b JOIN chain c ON b.id = c.base
  WHERE c.n < 10000
)
SELECT id, base, prefix_len, suffix_len, data, sha256, size, depth FROM chain ORDER BY n DESC
"""


def blob_load(db: sqlite_utils.Database, blob_id: int, *, verify: bool = True) -> StoredBlob:
    """The blob's exact bytes and depth; raises KeyError if absent, BlobCorrupt if it does not verify."""
    rows = db.execute(_CHAIN_SQL, [blob_id]).fetchall()
    if not rows:
        raise KeyError(f"no blob {blob_id}")
    data = b""
    for i, (_id, base, prefix_len, suffix_len, payload, _digest, _size, _depth) in enumerate(rows):
        middle = zstd.decompress(payload)
        if i == 0:
            if base is not None:
                raise BlobCorrupt(f"blob {blob_id}: chain ends at delta {_id} whose base is missing")
            data = middle
        else:
            data = apply_delta(data, Delta(prefix_len, suffix_len, middle))
    _id, _base, _p, _s, _payload, digest, size, depth = rows[-1]
    if verify and (len(data) != size or sha256(data) != digest):
        raise BlobCorrupt(f"blob {blob_id} does not match its stored hash")
    return StoredBlob(blob_id, data, depth)


def blob_get(db: sqlite_utils.Database, blob_id: int) -> bytes:
    """The exact bytes stored as ``blob_id``."""
    return blob_load(db, blob_id).data
