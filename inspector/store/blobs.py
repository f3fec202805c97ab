"""Bodies stored as content-addressed chunks, so the store grows with new bytes only.

An agent re-sends its whole history on every call, and every session re-sends the same system
prompt and tools. A body is stored as a list of pieces, each a run of bytes of a *chunk*
(``chunks``: zstd-compressed, addressed by a 16-byte hash, so the same bytes are stored
once). A new body is laid out against the best of a few recent bodies (``layout/pieces.plan``): the
runs it shares with that base become cuts of the base's pieces, the rest one new chunk per run. A
piece list grows by about one piece per call, so it is kept in *pages* of ``PAGE`` pieces from
the start (``pages``, content-addressed too): a body row holds its page ids and the pieces after
the last full page, and the pages it shares with its base are reused, never rewritten. Reading a
body is a few SELECTs and one decompression per chunk; its hash is verified on every read
(docs/architecture.md, "Body storage").

Bodies stored before this layout (rows with ``hash`` NULL: a keyframe or a delta against an
earlier blob, with a SHA-256) stay readable through ``layout/legacy.py``.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ctxscope.inspector.store.layout import legacy
from ctxscope.inspector.store.layout.known import KnownIds
from ctxscope.inspector.store.layout.packing import pack_ids, pack_pieces, unpack_ids, unpack_pieces
from ctxscope.inspector.store.layout.pieces import (
    Piece,
    PieceIndex,
    Segment,
    append,
    plan,
)

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd


MAX_DEPTH = 32  # legacy layout: deltas in a row before a fresh keyframe
MIN_DELTA_SIZE = 256  # smaller bodies are one chunk: matching would not pay for itself
ZSTD_LEVEL = 3
PAGE = 16  # pieces per page
GOOD_ENOUGH = 4096  # new bytes against a base below which the other bases are not tried
HASH_SIZE = 16
_BATCH = 500  # ids per IN (...) list


class BlobCorrupt(RuntimeError):
    """A stored blob does not reproduce the bytes it was stored from."""


@dataclass(frozen=True)
class StoredBlob:
    """A body as the writer remembers it, so the next body can be laid out against it."""

    id: int
    data: bytes
    depth: int = 0  # legacy layout: 0 for a keyframe, else 1 + the base's depth
    pieces: Sequence[Piece] | None = None  # None: a legacy blob, which cannot be a base
    pages: Sequence[int] = field(default=(), repr=False)  # the ids of its full pages


def body_hash(data: bytes) -> bytes:
    """The first 16 bytes of SHA-256 (faster than BLAKE2b here: the CPU computes SHA-256)."""
    return hashlib.sha256(data).digest()[:HASH_SIZE]


# ---- writing -------------------------------------------------------------------------------------


def blob_put(
    db: Db,
    data: bytes,
    bases: Iterable[StoredBlob] = (),
    *,
    search: bool = False,
    known: KnownIds | None = None,
    digest: bytes | None = None,
) -> StoredBlob:
    """Store ``data`` laid out against the best of ``bases`` (the same bytes again share its chunks and
    pages: a row of a few bytes); ``search``: they are other sessions' bodies, so look for shared
    runs beyond the common ends; ``known``: the writer's chunk ids, asked before the store;
    ``digest``: ``body_hash(data)`` when the caller has it already (hashing a 1 MB body costs ~0.5 ms)."""
    if digest is None or len(digest) != HASH_SIZE:
        digest = body_hash(data)
    base, segments = _choose(data, bases, search)
    pieces: list[Piece] = []
    index = PieceIndex(base.pieces) if base is not None and base.pieces is not None else None
    for seg in segments:
        if seg.shared and index is not None:
            append(pieces, index.cut(seg.base_start, seg.base_start + seg.end - seg.start))
        else:
            append(pieces, [(_chunk_put(db, data[seg.start : seg.end], known), 0, seg.end - seg.start)])
    # The last piece stays in the row: it is usually the shared suffix, which the next body moves on.
    full = max(len(pieces) - 1, 0) // PAGE
    pages: list[int] = []
    if base is not None and base.pieces is not None:  # the leading pages it shares with its base
        for k in range(min(full, len(base.pages))):
            if pieces[k * PAGE : (k + 1) * PAGE] != list(base.pieces[k * PAGE : (k + 1) * PAGE]):
                break
            pages.append(base.pages[k])
    for k in range(len(pages), full):
        pages.append(_page_put(db, pieces[k * PAGE : (k + 1) * PAGE]))
    cur = db.execute(
        "INSERT INTO blobs (sha256, size, depth, prefix_len, suffix_len, data, hash, pages, tail)"
        " VALUES ('', ?, 0, 0, 0, x'', ?, ?, ?)",
        [len(data), digest, pack_ids(pages), pack_pieces(pieces[full * PAGE :])],
    )
    assert cur.lastrowid is not None  # an INSERT sets it
    return StoredBlob(cur.lastrowid, data, 0, pieces, pages)


def _choose(data: bytes, bases: Iterable[StoredBlob], search: bool) -> tuple[StoredBlob | None, list[Any]]:
    """The base leaving the fewest new bytes, and the segments of ``data`` against it."""
    best: tuple[int, StoredBlob, list[Any]] | None = None
    if len(data) >= MIN_DELTA_SIZE:
        for base in bases:
            if base.pieces is None or not base.data:
                continue
            new, segments = plan(base.data, data, search=search)
            if best is None or new < best[0]:
                best = (new, base, segments)
            if new <= max(GOOD_ENOUGH, len(data) // 16):  # the newest base usually is: skip the passes over the others
                break
    if best is None:
        return None, [Segment(0, len(data), False)] if data else []
    return best[1], best[2]


def _chunk_put(db: Db, raw: bytes, known: KnownIds | None = None) -> int:
    digest = body_hash(raw)
    if known is not None:
        found = known.chunks.get(digest)
        if found is None:
            found = _chunk_store(db, raw, digest, known)
            known.keep(known.chunks, digest, found)
        return found
    return _chunk_store(db, raw, digest)


def _chunk_store(db: Db, raw: bytes, digest: bytes, known: KnownIds | None = None) -> int:
    """The chunk's id, inserted when new. The writer asks its ``KnownIds`` first, so a chunk that gets
    here is mostly new: it is inserted at once, and looked up only when the store already had it
    (one statement per new chunk, not two; docs/architecture.md, "One INSERT per call")."""
    if known is None:
        row = db.execute("SELECT id FROM chunks WHERE hash = ?", [digest]).fetchone()
        if row is not None:
            return cast("int", row[0])
    if known is not None and known.zstd_dict is not None:
        dict_id = known.zstd_dict[0]
        current = None if dict_id is None else (dict_id, _load_dict(db, dict_id))
    else:
        current = _current_dict(db)
        if known is not None:
            known.zstd_dict = (current[0] if current else None,)
    data = _compressor(current, len(raw)).compress(raw, zstd.ZstdCompressor.FLUSH_FRAME)
    cur = db.conn.execute(
        "INSERT INTO chunks (hash, dict, data) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
        [digest, current and current[0], data],
    )
    if cur.rowcount != 1:  # stored already (before this writer knew it): its id
        return cast("int", db.conn.execute("SELECT id FROM chunks WHERE hash = ?", [digest]).fetchone()[0])
    assert cur.lastrowid is not None
    if cur.lastrowid % DICT_TRY_EVERY == 0:
        trained = _maybe_train(db, cur.lastrowid, current)
        if trained is not None and known is not None:
            known.zstd_dict = (trained,)
    return cur.lastrowid


# Small chunks compress poorly alone: a dictionary trained on the chunks stored so far gives zstd the
# words and JSON shapes they share (about a third smaller on agent traffic).
DICT_TRY_EVERY = 32  # chunks between two looks at whether a dictionary is due (the first is trained then)
DICT_RETRAIN = 2048  # chunks stored with one dictionary before the next is trained
DICT_SAMPLES = 256  # the latest chunks it is trained on
DICT_SIZE = 32 * 1024
# Dictionary ids are random, never reused: safe to cache by id. The store trains a new one every
# DICT_RETRAIN chunks and keeps the old ones for their chunks, so the cache keeps the latest used
# (most recent last): with its digested tables each holds ~160 KB, and a writer that kept them all
# grew by ~0.8 MB per 10,000 small calls (docs/architecture.md, "Memory").
DICTS_KEPT = 4
_dict_cache: dict[int, zstd.ZstdDict] = {}
# One compressor per dictionary, kept: a new one loads the dictionary's tables again (~9 µs), which
# was most of the cost of a small chunk. Each call makes one whole frame: the bytes zstd.compress makes.
# A compressor keeps the working memory its largest input needed (~1.5 MB after a 1 MB chunk), so a
# chunk over KEEP_COMPRESSOR_BELOW gets one of its own, let go after (+0.02 ms on a 1 MB chunk).
_compressors: dict[int | None, zstd.ZstdCompressor] = {}
KEEP_COMPRESSOR_BELOW = 64 << 10


def _compressor(current: tuple[int, zstd.ZstdDict] | None, size: int) -> zstd.ZstdCompressor:
    if size > KEEP_COMPRESSOR_BELOW:
        return _new_compressor(current)
    key = current[0] if current else None
    found = _compressors.get(key)
    if found is None:
        if len(_compressors) >= 4:  # an old dictionary's compressor is not used again
            _compressors.clear()
        found = _compressors[key] = _new_compressor(current)
    return found


def _new_compressor(current: tuple[int, zstd.ZstdDict] | None) -> zstd.ZstdCompressor:
    return zstd.ZstdCompressor(ZSTD_LEVEL, zstd_dict=current[1].as_digested_dict if current else None)


def _load_dict(db: Db | sqlite3.Connection, dict_id: int) -> zstd.ZstdDict:
    found = _dict_cache.pop(dict_id, None)  # put back last: the most recently used
    if found is None:
        row = db.execute("SELECT data FROM zstd_dicts WHERE id = ?", [dict_id]).fetchone()
        if row is None:
            raise BlobCorrupt(f"zstd dictionary {dict_id} is missing")
        found = zstd.ZstdDict(row[0])
    _dict_cache[dict_id] = found
    if len(_dict_cache) > DICTS_KEPT:  # readers' threads share the cache: list() and pop() each hold the GIL
        for stale in list(_dict_cache)[:-DICTS_KEPT]:
            _dict_cache.pop(stale, None)
    return found


def forget_dictionaries() -> None:
    """Drop the dictionaries loaded so far (an idle writer child); they are loaded again by id."""
    _dict_cache.clear()
    _compressors.clear()


def text_of(conn: sqlite3.Connection, data: bytes | None, dict_id: int | None) -> str | None:
    """SQL ``ctxscope_text(data, dict)`` (store/db.py): a search segment's compressed text, as
    migration m013 stored it (m014 reads it for the last time)."""
    if data is None:
        return None
    if dict_id is None:
        return cast("str | None", zstd.decompress(data).decode())
    return cast("str | None", zstd.decompress(data, zstd_dict=_load_dict(conn, dict_id)).decode())


def _current_dict(db: Db) -> tuple[int, zstd.ZstdDict] | None:
    """The newest dictionary (looked up each time unless the writer's ``KnownIds`` holds it: a rolled-back
    transaction may have taken it away, and a rollback clears those)."""
    row = db.execute("SELECT id FROM zstd_dicts ORDER BY after_chunk DESC LIMIT 1").fetchone()
    return None if row is None else (row[0], _load_dict(db, row[0]))


def _maybe_train(db: Db, chunk_id: int, current: tuple[int, zstd.ZstdDict] | None) -> int | None:
    """The id of a dictionary trained now, if one is due and the samples allow it."""
    if current is not None:
        after = db.execute("SELECT after_chunk FROM zstd_dicts WHERE id = ?", [current[0]]).fetchone()[0]
        if chunk_id - after < DICT_RETRAIN:
            return None
    rows = db.execute("SELECT id, dict, data FROM chunks ORDER BY id DESC LIMIT ?", [DICT_SAMPLES]).fetchall()
    try:
        samples = [_decompress(db, cid, d, data) for cid, d, data in rows]
        trained = zstd.train_dict(samples, DICT_SIZE)
    except Exception:  # too few or too uniform samples: try again DICT_TRY_EVERY chunks later
        return None
    dict_id = random.getrandbits(62) + 1
    db.execute(
        "INSERT INTO zstd_dicts (id, after_chunk, data) VALUES (?, ?, ?)", [dict_id, chunk_id, trained.dict_content]
    )
    return dict_id


def _decompress(db: Db, chunk_id: int, dict_id: int | None, data: bytes) -> bytes:
    try:
        if dict_id is None:
            return zstd.decompress(data)
        return zstd.decompress(data, zstd_dict=_load_dict(db, dict_id))
    except BlobCorrupt:
        raise
    except Exception as e:  # a damaged frame
        raise BlobCorrupt(f"chunk {chunk_id} does not decompress: {e}") from e


def _page_put(db: Db, pieces: Sequence[Piece]) -> int:
    packed = pack_pieces(pieces)
    digest = body_hash(packed)
    row = db.execute("SELECT id FROM pages WHERE hash = ?", [digest]).fetchone()
    if row is not None:
        return cast("int", row[0])
    cur = db.execute("INSERT INTO pages (hash, pieces) VALUES (?, ?)", [digest, packed])
    assert cur.lastrowid is not None
    return cur.lastrowid


# ---- reading -------------------------------------------------------------------------------------


def _select_in(db: Db, sql: str, ids: Sequence[int]) -> dict[int, bytes]:
    """``sql`` (with ``{}`` for the id list) run over ``ids`` in batches: id -> value."""
    return {k: v[0] for k, v in _select_rows(db, sql, ids).items()}


def _select_rows(db: Db, sql: str, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """``sql`` (with ``{}`` for the id list) run over ``ids`` in batches: id -> the other columns."""
    out: dict[int, tuple[Any, ...]] = {}
    for i in range(0, len(ids), _BATCH):
        batch = ids[i : i + _BATCH]
        out.update((r[0], tuple(r[1:])) for r in db.execute(sql.format(",".join("?" * len(batch))), batch))
    return out


def _page_pieces(db: Db, blob_id: int, page_ids: Sequence[int]) -> list[Piece]:
    found = _select_in(db, "SELECT id, pieces FROM pages WHERE id IN ({})", sorted(set(page_ids)))
    pieces: list[Piece] = []
    for pid in page_ids:
        if pid not in found:
            raise BlobCorrupt(f"blob {blob_id}: page {pid} is missing")
        pieces += unpack_pieces(found[pid])
    return pieces


def blob_load(db: Db, blob_id: int, *, verify: bool = True) -> StoredBlob:
    """The blob's exact bytes; raises KeyError if absent, BlobCorrupt if it does not verify."""
    row = db.execute("SELECT hash, size, pages, tail FROM blobs WHERE id = ?", [blob_id]).fetchone()
    if row is None:
        raise KeyError(f"no blob {blob_id}")
    digest, size, packed_pages, tail = row
    if digest is None:
        try:
            data, depth = legacy.load(db, blob_id, verify=verify)
        except legacy.BrokenChain as e:
            raise BlobCorrupt(str(e)) from e
        return StoredBlob(blob_id, data, depth)
    page_ids = unpack_ids(packed_pages)
    pieces = _page_pieces(db, blob_id, page_ids) + unpack_pieces(tail)
    wanted = sorted({p[0] for p in pieces})
    chunks = _select_rows(db, "SELECT id, dict, data FROM chunks WHERE id IN ({})", wanted)
    views = {}
    for cid in wanted:
        if cid not in chunks:
            raise BlobCorrupt(f"blob {blob_id}: chunk {cid} is missing")
        views[cid] = memoryview(_decompress(db, cid, *chunks[cid]))
    data = b"".join(views[c][o : o + n] for c, o, n in pieces)
    if verify and (len(data) != size or body_hash(data) != digest):
        raise BlobCorrupt(f"blob {blob_id} does not match its stored hash")
    return StoredBlob(blob_id, data, 0, pieces, page_ids)


def blob_get(db: Db, blob_id: int) -> bytes:
    """The exact bytes stored as ``blob_id``."""
    return blob_load(db, blob_id).data


def stored_bytes(db: Db) -> int:
    """Bytes the bodies take in the file's tables (compressed chunks, piece lists, legacy blobs)."""

    def one(sql: str) -> int:
        return int(db.execute(sql).fetchone()[0] or 0)

    return (
        one("SELECT SUM(length(data)) + SUM(COALESCE(length(pages), 0) + COALESCE(length(tail), 0)) FROM blobs")
        + one("SELECT SUM(length(data)) FROM chunks")
        + one("SELECT SUM(length(pieces)) FROM pages")
    )


# ---- deleting ------------------------------------------------------------------------------------


def sweep(db: Db) -> int:
    """Delete the pages and chunks no blob uses any more (after blobs were deleted); returns how many."""
    used_pages: set[int] = set()
    used_chunks: set[int] = set()
    for packed_pages, tail in db.execute("SELECT pages, tail FROM blobs WHERE hash IS NOT NULL"):
        used_pages.update(unpack_ids(packed_pages))
        used_chunks.update(p[0] for p in unpack_pieces(tail))
    dead_pages = []
    for pid, packed in db.execute("SELECT id, pieces FROM pages"):
        if pid in used_pages:
            used_chunks.update(p[0] for p in unpack_pieces(packed))
        else:
            dead_pages.append(pid)
    dead_chunks = [cid for (cid,) in db.execute("SELECT id FROM chunks") if cid not in used_chunks]
    for table, dead in (("pages", dead_pages), ("chunks", dead_chunks)):
        for i in range(0, len(dead), _BATCH):
            batch = dead[i : i + _BATCH]
            db.execute(f"DELETE FROM {table} WHERE id IN ({','.join('?' * len(batch))})", batch)
    used = "SELECT dict FROM chunks WHERE dict IS NOT NULL"
    if "dict" in {column for _, column, *_ in db.execute("PRAGMA table_info(search_segments)")}:  # before m014
        used += " UNION SELECT dict FROM search_segments WHERE dict IS NOT NULL"
    db.execute(
        f"DELETE FROM zstd_dicts WHERE id NOT IN ({used}) AND after_chunk < (SELECT MAX(after_chunk) FROM zstd_dicts)"
    )  # the newest stays, for new chunks
    return len(dead_pages) + len(dead_chunks)
