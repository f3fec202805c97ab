"""Body storage: byte-exact round trips through chunks and pages, sharing, sweeping, corruption, the older
layout, recompression recipes."""

from __future__ import annotations

import gzip
import os
import random
import sys
import zlib

import pytest

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.blobs import (
    PAGE,
    BlobCorrupt,
    blob_get,
    blob_load,
    blob_put,
    sweep,
)
from ctxscope.inspector.store.layout.legacy import Delta, apply_delta, make_delta, sha256
from ctxscope.inspector.store.layout.packing import pack_pieces, unpack_pieces
from ctxscope.inspector.store.layout.pieces import common_prefix, common_suffix
from ctxscope.inspector.store.recode import apply_recipe, find_recipe

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd


@pytest.fixture
def db(tmp_path):
    d = store.connect(tmp_path / "b.db")
    yield d
    d.close()


def _naive_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_common_prefix_and_suffix_match_a_naive_scan():
    rng = random.Random(7)
    for _ in range(500):
        base = bytes(rng.choice(b"ab") for _ in range(rng.randrange(0, 40)))
        new = bytes(rng.choice(b"ab") for _ in range(rng.randrange(0, 40)))
        assert common_prefix(base, new) == _naive_prefix(base, new)
        limit = rng.randrange(0, 45)
        assert common_suffix(base, new, limit) == min(_naive_prefix(base[::-1], new[::-1]), limit)


def test_delta_round_trips_random_edits():
    rng = random.Random(3)
    for _ in range(300):
        base = os.urandom(rng.randrange(0, 300))
        new = bytearray(base)
        for _ in range(rng.randrange(0, 4)):
            at = rng.randrange(0, len(new) + 1)
            if rng.random() < 0.5:
                new[at:at] = os.urandom(rng.randrange(1, 30))
            else:
                del new[at : at + rng.randrange(1, 30)]
        d = make_delta(base, bytes(new))
        assert d.prefix_len + d.suffix_len + len(d.middle) == len(new)
        assert d.prefix_len + d.suffix_len <= len(base)
        assert apply_delta(base, d) == bytes(new)


def test_delta_of_an_appended_history_is_only_the_new_part():
    base = b'{"messages":[' + b'{"role":"user","content":"x"},' * 1000 + b'{"last":1}],"tools":[]}'
    new = base.replace(b'{"last":1}]', b'{"last":1},{"role":"assistant","content":"new"}]')
    d = make_delta(base, new)
    assert d.middle == b',{"role":"assistant","content":"new"}'
    assert apply_delta(base, d) == new


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"x",
        os.urandom(100_000),  # incompressible
        gzip.compress(os.urandom(50_000)),  # an already compressed body
        zstd.compress(b"hello " * 100_000),
        bytes(range(256)) * 40_000,  # ~10 MB, highly compressible
        os.urandom(3 * 2**20),  # a big random body
    ],
    ids=["empty", "one", "random", "gzip", "zstd", "huge", "big-random"],
)
def test_blob_round_trips_byte_exact(db, body):
    blob = blob_put(db, body)
    assert blob_get(db, blob.id) == body
    assert blob_load(db, blob.id).pieces is not None


def _chunk_bytes(db) -> int:
    return db.execute("SELECT COALESCE(SUM(length(data)), 0) FROM chunks").fetchone()[0]


def _edits(rng: random.Random, body: bytes, kind: str) -> bytes:
    if kind == "append":  # a new message before the closing bracket and the tools
        at = len(body) - 300
        return body[:at] + os.urandom(rng.randrange(1, 3000)) + body[at:]
    if kind == "middle":  # an edit deep in the history
        at = rng.randrange(len(body))
        return body[:at] + os.urandom(rng.randrange(1, 200)) + body[at + rng.randrange(0, 300) :]
    return body[:200] + os.urandom(2000) + body[-20_000:]  # compaction: the history replaced by a summary


def test_appends_edits_and_compactions_round_trip_and_cost_only_new_bytes(db):
    rng = random.Random(1)
    body = os.urandom(40_000)
    prev, stored, new_bytes = None, [], len(body)
    for _ in range(300):
        kind = rng.choice(["append"] * 7 + ["middle"] * 2 + ["compaction"])
        nxt = _edits(rng, body, kind)
        new_bytes += max(0, len(nxt) - len(body)) + {"append": 0, "middle": 200, "compaction": 2000}[kind]
        body = nxt
        prev = blob_put(db, body, [prev] if prev else [])
        stored.append((prev.id, body))
    for blob_id, expected in stored:
        assert blob_get(db, blob_id) == expected
    # Random bytes do not compress: what is stored is the new bytes, not calls x body size.
    assert _chunk_bytes(db) < 1.2 * new_bytes
    sizes = [len(b) for _, b in stored]
    assert _chunk_bytes(db) < sum(sizes) / 20


def test_a_long_session_keeps_its_piece_list_in_shared_pages(db):
    body = b'{"messages":[' + os.urandom(5000).hex().encode()
    tail = b'],"tools":' + os.urandom(5000).hex().encode() + b"}"
    prev = blob_put(db, body + tail)
    for _ in range(200):
        body += b',"' + os.urandom(100).hex().encode() + b'"'
        prev = blob_put(db, body + tail, [prev])
        assert blob_get(db, prev.id) == body + tail
    assert len(prev.pieces) > 200 and len(prev.pages) == (len(prev.pieces) - 1) // PAGE
    # Each page is written once: a body reuses its predecessor's full pages.
    assert db.execute("SELECT COUNT(*) FROM pages").fetchone()[0] <= 200 // PAGE + 2
    assert db.execute("SELECT MAX(length(tail)) FROM blobs").fetchone()[0] <= 12 * PAGE


def test_a_new_session_shares_the_system_prompt_and_tools_of_another(db):
    system_and_tools = os.urandom(20_000).hex().encode()
    a = b'{"messages":["first session"],"system":"' + system_and_tools + b'","metadata":"session-a"}'
    b = b'{"messages":["second, with other words"],"system":"' + system_and_tools + b'","metadata":"session-b"}'
    first = blob_put(db, a)
    before = _chunk_bytes(db)
    second = blob_put(db, b, [first])
    assert blob_get(db, second.id) == b
    assert _chunk_bytes(db) - before < 500  # the 40 KB shared middle is not stored again


def test_identical_content_is_stored_once(db):
    body = os.urandom(5000)
    a, b = blob_put(db, body), blob_put(db, body)
    assert blob_get(db, a.id) == blob_get(db, b.id) == body
    assert db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1  # the same chunk, by its hash
    again = blob_put(db, body, [b])
    assert again.pieces == b.pieces and db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1
    c = blob_put(db, body + b"!", [a])
    assert blob_get(db, c.id) == body + b"!" and len(c.pieces) == 2


def test_tiny_and_non_json_bodies_round_trip_against_any_base(db):
    base = blob_put(db, b"stable prefix " * 1000)
    for body in (b"", b"x", b"stable", os.urandom(300), b"stable prefix " * 999 + b"\x00\xff", "é€".encode() * 50):
        blob = blob_put(db, body, [base])
        assert blob_get(db, blob.id) == body


def test_a_corrupted_chunk_is_detected_on_read(db):
    base = blob_put(db, b"stable prefix " * 1000)
    child = blob_put(db, b"stable prefix " * 1000 + b"tail", [base])
    assert blob_get(db, child.id).endswith(b"tail")
    first_chunk = child.pieces[0][0]
    db.execute("UPDATE chunks SET data = ? WHERE id = ?", [zstd.compress(b"other prefix " * 1000), first_chunk])
    with pytest.raises(BlobCorrupt):
        blob_get(db, child.id)
    db.execute("UPDATE chunks SET data = x'00' WHERE id = ?", [first_chunk])
    with pytest.raises(BlobCorrupt):
        blob_get(db, child.id)
    db.execute("DELETE FROM chunks WHERE id = ?", [first_chunk])
    with pytest.raises(BlobCorrupt):
        blob_get(db, child.id)
    with pytest.raises(KeyError):
        blob_get(db, 999_999)


def test_sweep_frees_what_no_blob_uses_and_keeps_the_rest(db):
    shared = os.urandom(8000)
    a = blob_put(db, shared + os.urandom(3000))
    b = blob_put(db, shared + os.urandom(3000), [a])
    c = blob_put(db, os.urandom(4000))
    db.execute("DELETE FROM blobs WHERE id IN (?, ?)", [a.id, c.id])
    assert sweep(db) == 1  # c's chunk; a's chunk holds the bytes b shares, so it stays
    assert blob_get(db, b.id) == b.data
    db.execute("DELETE FROM blobs")
    sweep(db)
    assert db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0


def _legacy_put(db, data: bytes, base: tuple[int, bytes] | None) -> int:
    """A row as the layout before chunks stored it: a keyframe or a delta against ``base``."""
    if base is None:
        row = [sha256(data), len(data), None, 0, 0, 0, zstd.compress(data)]
    else:
        d = make_delta(base[1], data)
        row = [sha256(data), len(data), base[0], 1, d.prefix_len, d.suffix_len, zstd.compress(d.middle)]
    return db.execute(
        "INSERT INTO blobs (sha256, size, base, depth, prefix_len, suffix_len, data) VALUES (?, ?, ?, ?, ?, ?, ?)", row
    ).lastrowid


def test_bodies_of_the_older_layout_still_read_and_can_be_bases(db):
    first = b"history " * 500
    second = first + b"and more"
    k = _legacy_put(db, first, None)
    d = _legacy_put(db, second, (k, first))
    assert blob_get(db, k) == first and blob_get(db, d) == second
    old = blob_load(db, d)
    assert old.pieces is None  # it cannot lend pieces, so the next body is stored whole
    nxt = blob_put(db, second + b" still", [old])
    assert blob_get(db, nxt.id) == second + b" still"
    db.execute("UPDATE blobs SET data = ? WHERE id = ?", [zstd.compress(b"tampered " * 500), k])
    with pytest.raises(BlobCorrupt):
        blob_get(db, d)


def test_apply_delta_with_empty_suffix():
    assert apply_delta(b"abcdef", Delta(3, 0, b"XY")) == b"abcXY"


# -- recompression recipes --------------------------------------------------------------------

_TEXT = b" ".join(random.Random(5).choice([b"alpha", b"beta", b"gamma", b"delta", b"epsilon"]) for _ in range(20_000))


@pytest.mark.parametrize(
    "encoding,compress",
    [
        ("zstd", lambda d: zstd.compress(d)),
        ("zstd", lambda d: zstd.compress(d, 1)),
        ("zstd", lambda d: zstd.compress(d, options={zstd.CompressionParameter.checksum_flag: 1})),
        ("zstd", lambda d: (lambda c: c.compress(d) + c.flush())(zstd.ZstdCompressor())),  # streamed
        ("gzip", lambda d: gzip.compress(d)),
        ("gzip", lambda d: gzip.compress(d, 1, mtime=0)),
        ("deflate", lambda d: zlib.compress(d)),
        ("deflate", lambda d: (lambda c: c.compress(d) + c.flush())(zlib.compressobj(6, zlib.DEFLATED, -15))),
    ],
)
def test_recipe_reproduces_common_compressors_byte_exact(encoding, compress):
    raw = compress(_TEXT)
    recipe = find_recipe(raw, _TEXT, encoding)
    assert recipe is not None
    assert apply_recipe(_TEXT, recipe) == raw


def test_no_recipe_for_what_cannot_be_reproduced():
    named = gzip.GzipFile  # a gzip header carrying a file name is not reproduced
    import io

    buf = io.BytesIO()
    with named(filename="body.json", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(_TEXT)
    assert find_recipe(buf.getvalue(), _TEXT, "gzip") is None
    assert find_recipe(zstd.compress(_TEXT, 19), _TEXT, "zstd", quick=True) is None
    assert find_recipe(b"not zstd at all", _TEXT, "zstd") is None
    assert find_recipe(zstd.compress(_TEXT), _TEXT, "br") is None
    assert find_recipe(zstd.compress(_TEXT), _TEXT, "gzip, zstd") is None  # chains are stored raw


def test_piece_lists_pack_as_varints_and_come_back():
    rng = random.Random(9)
    for _ in range(200):
        pieces = [
            (rng.randrange(1, 2**40), rng.choice([0, rng.randrange(2**32)]), rng.randrange(1, 2**31))
            for _ in range(rng.randrange(0, 40))
        ]
        assert unpack_pieces(pack_pieces(pieces)) == pieces
    assert len(pack_pieces([(300, 0, 5000)])) == 5  # 2 + 1 + 2 bytes


def test_chunks_compressed_with_a_trained_dictionary_read_back_on_a_new_connection(tmp_path):
    from ctxscope.inspector.store import blobs

    path = tmp_path / "d.db"
    db = store.connect(path)
    rng = random.Random(4)
    words = [f"word{i}" for i in range(2000)]
    bodies = [" ".join(rng.choice(words) for _ in range(rng.randrange(200, 800))).encode() for _ in range(120)]
    ids = [blob_put(db, body).id for body in bodies]  # unrelated bodies: a chunk each
    db.conn.commit()
    assert db.execute("SELECT COUNT(*) FROM zstd_dicts").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM chunks WHERE dict IS NOT NULL").fetchone()[0] > 60
    db.close()
    blobs._dict_cache.clear()  # as another process would start
    again = store.connect(path)
    assert [blob_get(again, i) for i in ids] == bodies
    again.execute("UPDATE zstd_dicts SET id = id + 1")  # the dictionary a chunk names is gone
    blobs._dict_cache.clear()
    with pytest.raises(BlobCorrupt):
        blob_get(again, ids[-1])
    again.close()


def test_a_writer_that_keeps_its_ids_compresses_with_the_dictionary_trained_meanwhile(tmp_path):
    # The writer's KnownIds hold the newest dictionary's id: the chunks after its training use it,
    # as they do when the store is asked each time, and a cleared KnownIds asks again.
    from ctxscope.inspector.store.layout.known import KnownIds

    rng = random.Random(5)
    words = [f"word{i}" for i in range(2000)]
    bodies = [" ".join(rng.choice(words) for _ in range(rng.randrange(200, 800))).encode() for _ in range(120)]
    dicts = {}
    for name, known in (("asked", None), ("kept", KnownIds())):
        db = store.connect(tmp_path / f"{name}.db")
        ids = [blob_put(db, body, known=known).id for body in bodies[:80]]
        if known is not None:
            known.clear()
        ids += [blob_put(db, body, known=known).id for body in bodies[80:]]
        db.conn.commit()
        assert [blob_get(db, i) for i in ids] == bodies
        dicts[name] = db.execute("SELECT COUNT(*), MIN(id) FROM chunks WHERE dict IS NOT NULL").fetchone()
        assert db.execute("SELECT COUNT(DISTINCT dict) FROM chunks WHERE dict IS NOT NULL").fetchone()[0] == 1
        db.close()
    assert dicts["kept"] == dicts["asked"] and dicts["kept"][0] > 60


def test_a_long_lived_process_keeps_a_few_dictionaries_and_reads_every_chunk(tmp_path, monkeypatch):
    # A store trains a dictionary every DICT_RETRAIN chunks and keeps them all for their chunks; a
    # process holds only the latest few it used, and loads an older one again when a chunk needs it.
    from ctxscope.inspector.store import blobs

    monkeypatch.setattr(blobs, "DICT_RETRAIN", 32)
    blobs.forget_dictionaries()
    db = store.connect(tmp_path / "d.db")
    rng = random.Random(6)
    words = [f"word{i}" for i in range(2000)]
    bodies = [" ".join(rng.choice(words) for _ in range(rng.randrange(200, 400))).encode() for _ in range(320)]
    ids = [blob_put(db, body).id for body in bodies]
    db.conn.commit()
    trained = db.execute("SELECT COUNT(*) FROM zstd_dicts").fetchone()[0]
    used = db.execute("SELECT COUNT(DISTINCT dict) FROM chunks").fetchone()[0]
    assert trained >= blobs.DICTS_KEPT + 3 and used >= blobs.DICTS_KEPT + 3
    assert len(blobs._dict_cache) <= blobs.DICTS_KEPT
    assert [blob_get(db, i) for i in ids] == bodies  # the oldest chunks' dictionaries load again
    assert len(blobs._dict_cache) <= blobs.DICTS_KEPT
    db.close()
    blobs.forget_dictionaries()
