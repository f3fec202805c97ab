"""Reading bodies stored before chunks: a zstd keyframe, or a delta against an earlier blob.

Such rows (``hash`` NULL) are never written any more; they stay readable so an old database keeps
every body it held (docs/architecture.md, "Body storage").
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxscope.inspector.store.layout.pieces import common_prefix, common_suffix

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd


class BrokenChain(RuntimeError):
    """A delta whose base is missing, or bytes that do not match the stored hash."""


@dataclass(frozen=True)
class Delta:
    prefix_len: int
    suffix_len: int
    middle: bytes


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


def load(db: Db, blob_id: int, *, verify: bool = True) -> tuple[bytes, int]:
    """The blob's bytes and chain depth; KeyError if absent, BrokenChain if it does not verify."""
    rows = db.execute(_CHAIN_SQL, [blob_id]).fetchall()
    if not rows:
        raise KeyError(f"no blob {blob_id}")
    data = b""
    for i, (_id, base, prefix_len, suffix_len, payload, _digest, _size, _depth) in enumerate(rows):
        middle = zstd.decompress(payload)
        if i == 0:
            if base is not None:
                raise BrokenChain(f"blob {blob_id}: chain ends at delta {_id} whose base is missing")
            data = middle
        else:
            data = apply_delta(data, Delta(prefix_len, suffix_len, middle))
    _id, _base, _p, _s, _payload, digest, size, depth = rows[-1]
    if verify and (len(data) != size or sha256(data) != digest):
        raise BrokenChain(f"blob {blob_id} does not match its stored hash")
    return data, depth
