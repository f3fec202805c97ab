"""Body storage: byte-exact round trips, deltas, chain caps, dedup, corruption, recompression recipes."""

from __future__ import annotations

import gzip
import os
import random
import zlib

import pytest

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.blobs import (
    MAX_DEPTH,
    BlobCorrupt,
    Delta,
    StoredBlob,
    apply_delta,
    blob_get,
    blob_load,
    blob_put,
    choose_base,
    common_prefix,
    common_suffix,
    make_delta,
)
from ctxscope.inspector.store.recode import apply_recipe, find_recipe

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd  # type: ignore[no-redef]


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
    assert blob_load(db, blob.id).depth == 0


def test_delta_chain_round_trips_and_is_capped(db):
    rng = random.Random(1)
    body = os.urandom(20_000)
    prev: StoredBlob | None = None
    stored = []
    for _ in range(3 * MAX_DEPTH):
        at = rng.randrange(0, len(body))
        body = body[:at] + os.urandom(rng.randrange(1, 200)) + body[at:]
        prev = blob_put(db, body, [prev] if prev else [])
        assert prev.depth <= MAX_DEPTH
        stored.append((prev.id, body))
    depths = [r[0] for r in db.execute("SELECT depth FROM blobs ORDER BY id")]
    assert max(depths) == MAX_DEPTH and depths.count(0) == 3  # a keyframe each time the cap is hit
    for blob_id, expected in stored:
        assert blob_get(db, blob_id) == expected


def test_identical_content_is_stored_once(db):
    body = os.urandom(5000)
    a, b = blob_put(db, body), blob_put(db, body)
    assert a.id == b.id
    assert db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 1


def test_unrelated_body_becomes_a_keyframe_and_best_base_wins(db):
    main = b"main-thread system prompt " * 400
    side = b"sub-agent other system prompt " * 400
    m = blob_put(db, main)
    s = blob_put(db, side, [m])
    assert s.depth == 0  # nothing shared: a delta would not pay
    nxt = main + b"one more message"
    assert choose_base(nxt, [s, m])[0].id == m.id  # the base sharing the longest prefix
    stored = blob_put(db, nxt, [s, m])
    assert stored.depth == 1 and blob_get(db, stored.id) == nxt
    row = db.execute("SELECT base, prefix_len, length(data) FROM blobs WHERE id = ?", [stored.id]).fetchone()
    assert row[0] == m.id and row[1] == len(main) and row[2] < 100


def test_small_bodies_are_never_deltas():
    base = StoredBlob(1, b"a" * 100, 0)
    assert choose_base(b"a" * 101, [base]) is None


def test_tampered_blob_is_detected(db):
    base = blob_put(db, b"stable prefix " * 1000)
    child = blob_put(db, b"stable prefix " * 1000 + b"tail", [base])
    db.execute("UPDATE blobs SET data = ? WHERE id = ?", [zstd.compress(b"other prefix " * 1000), base.id])
    with pytest.raises(BlobCorrupt):
        blob_get(db, child.id)
    db.execute("DELETE FROM blobs WHERE id = ?", [base.id])
    with pytest.raises(BlobCorrupt):
        blob_get(db, child.id)
    with pytest.raises(KeyError):
        blob_get(db, 999_999)


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
