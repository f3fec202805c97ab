import gzip
import os
import sys
import types
import zlib

import pytest

from ctxscope.proxy.wire.decoding import BodyDecodeError, decode_body

try:
    from compression import zstd
except ImportError:
    from backports import zstd

PAYLOAD = b'{"model":"x","messages":[' + b'{"role":"user","content":"hello"},' * 500 + b"{}]}"


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


def zstd_streamed(data: bytes) -> bytes:
    """A frame without a content size in its header, as streaming encoders write it."""
    c = zstd.ZstdCompressor()
    return c.compress(data) + c.flush()


@pytest.mark.parametrize("encoding", [None, "", "identity", "Identity", " identity "])
def test_identity_returns_the_bytes(encoding):
    assert decode_body(PAYLOAD, encoding) == PAYLOAD


@pytest.mark.parametrize(
    "encoding, encode",
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("zstd", zstd.compress),
        ("zstd", zstd_streamed),
    ],
)
def test_single_encodings(encoding, encode):
    assert decode_body(encode(PAYLOAD), encoding) == PAYLOAD


def test_zstd_frame_has_no_content_size():
    frame = zstd_streamed(PAYLOAD)
    assert zstd.get_frame_info(frame).decompressed_size is None
    assert decode_body(frame, "zstd") == PAYLOAD


def test_zstd_multi_frame():
    data = zstd.compress(b"first ") + zstd_streamed(b"second ") + zstd.compress(b"third")
    assert decode_body(data, "zstd") == b"first second third"


def test_gzip_multi_member_and_nul_padding():
    data = gzip.compress(b"one ") + gzip.compress(b"two") + b"\0\0\0"
    assert decode_body(data, "gzip") == b"one two"


def test_chained_encodings_decode_in_reverse_order():
    data = zstd.compress(gzip.compress(PAYLOAD))  # gzip applied first, then zstd
    assert decode_body(data, "gzip, zstd") == PAYLOAD
    assert decode_body(data, "gzip,zstd") == PAYLOAD
    assert decode_body(gzip.compress(zlib.compress(PAYLOAD)), "deflate, identity, gzip") == PAYLOAD


def test_empty_body_with_an_encoding():
    assert decode_body(b"", "gzip") == b""
    assert decode_body(b"", "zstd") == b""


@pytest.mark.parametrize(
    "encoding, data",
    [
        ("gzip", b"not gzip at all"),
        ("deflate", b"\xff\xfe garbage"),
        ("zstd", b"definitely not zstd"),
        ("gzip", gzip.compress(PAYLOAD, mtime=0)[:10] + b"\x00corrupt" * 4),
    ],
    ids=["gzip-not-gzip", "deflate-garbage", "zstd-not-zstd", "gzip-corrupt-after-header"],  # the same in every worker
)
def test_corrupt_data_raises(encoding, data):
    with pytest.raises(BodyDecodeError):
        decode_body(data, encoding)


def test_body_decode_error_is_a_value_error():
    assert issubclass(BodyDecodeError, ValueError)


def test_unknown_encoding_raises():
    with pytest.raises(BodyDecodeError, match="unsupported"):
        decode_body(b"abc", "compress")


@pytest.mark.parametrize(
    "encoding, encode",
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", raw_deflate), ("zstd", zstd_streamed)],
)
def test_truncated_body_raises_unless_allowed(encoding, encode):
    # Incompressible and larger than a zstd block (128 KiB), so a cut still leaves whole blocks.
    text = os.urandom(200_000).hex().encode()
    data = encode(text)
    cut = data[: len(data) * 2 // 3]
    with pytest.raises(BodyDecodeError, match="truncated"):
        decode_body(cut, encoding)
    partial = decode_body(cut, encoding, allow_truncated=True)
    assert 0 < len(partial) < len(text)
    assert text.startswith(partial)


@pytest.mark.parametrize(
    "encoding, encode",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("zstd", zstd.compress),
        ("zstd", zstd_streamed),
    ],
)
def test_decompression_bomb_is_capped(encoding, encode):
    bomb = encode(b"\0" * (4 * 2**20))
    assert len(bomb) < 64 * 1024
    with pytest.raises(BodyDecodeError, match="limit"):
        decode_body(bomb, encoding, max_size=2**20)
    assert len(decode_body(bomb, encoding, max_size=4 * 2**20)) == 4 * 2**20


def test_cap_counts_all_members_and_frames():
    data = zstd.compress(b"a" * 600) + zstd.compress(b"b" * 600)
    with pytest.raises(BodyDecodeError, match="limit"):
        decode_body(data, "zstd", max_size=1000)
    data = gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600)
    with pytest.raises(BodyDecodeError, match="limit"):
        decode_body(data, "gzip", max_size=1000)
    assert decode_body(data, "gzip", max_size=1200) == b"a" * 600 + b"b" * 600


def test_cap_applies_to_each_stage_of_a_chain():
    data = gzip.compress(zstd.compress(b"x" * 5000))
    with pytest.raises(BodyDecodeError, match="limit"):
        decode_body(data, "zstd, gzip", max_size=4000)


def test_br_without_brotli_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "brotli", None)  # makes `import brotli` raise ImportError
    with pytest.raises(BodyDecodeError, match="br decoding needs the brotli package"):
        decode_body(b"\x0b\x02\x80hello\x03", "br")


class _FakeBrotliDecompressor:
    """Stands in for brotli.Decompressor (1.2 and later): 'compressed' data is the text reversed,
    '!' ends it; output past ``output_buffer_limit`` waits for calls with no input."""

    def __init__(self):
        self.finished = False
        self.pending = b""

    def process(self, data, output_buffer_limit=None):
        if data.startswith(b"?"):
            raise _fake_brotli.error("bad data")
        if data:
            self.finished = data.endswith(b"!")
            self.pending += data.rstrip(b"!")[::-1]
        limit = len(self.pending) if output_buffer_limit is None else output_buffer_limit
        out, self.pending = self.pending[:limit], self.pending[limit:]
        return out

    def can_accept_more_data(self):
        return not self.pending

    def is_finished(self):
        return self.finished and not self.pending


_fake_brotli = types.SimpleNamespace(Decompressor=_FakeBrotliDecompressor, error=type("error", (Exception,), {}))


def test_br_with_brotli_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "brotli", _fake_brotli)
    assert decode_body(b"olleh!", "br") == b"hello"
    assert decode_body(gzip.compress(b"olleh!"), "br, gzip") == b"hello"
    with pytest.raises(BodyDecodeError, match="truncated"):
        decode_body(b"olleh", "br")
    assert decode_body(b"olleh", "br", allow_truncated=True) == b"hello"
    with pytest.raises(BodyDecodeError, match="limit"):
        decode_body(b"olleh!", "br", max_size=3)
    with pytest.raises(BodyDecodeError, match="invalid br"):
        decode_body(b"?", "br")


class _BrotliBomb:
    """A brotli 1.2 decompressor fed a bomb: 200 MB of zeros, never more at once than the limit asked."""

    left = 200 << 20

    def __init__(self):
        self.left = _BrotliBomb.left

    def process(self, data, output_buffer_limit=None):
        n = self.left if output_buffer_limit is None else min(self.left, output_buffer_limit)
        self.left -= n
        return bytes(n)

    def can_accept_more_data(self):
        return self.left == 0

    def is_finished(self):
        return self.left == 0


def test_a_br_bomb_is_refused_without_holding_its_output(monkeypatch):
    import tracemalloc

    from ctxscope.proxy.wire.decoding import KEEP_BYTES, DecodedTooLarge

    fake = types.SimpleNamespace(Decompressor=_BrotliBomb, error=_fake_brotli.error)
    monkeypatch.setitem(sys.modules, "brotli", fake)
    tracemalloc.start()
    try:
        with pytest.raises(DecodedTooLarge):
            decode_body(b"bomb", "br")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < KEEP_BYTES + (8 << 20), f"held {peak >> 20} MB"


def test_br_is_not_decoded_with_a_brotli_that_cannot_bound_its_output(monkeypatch):
    class Old:  # brotli before 1.2: process() takes no output limit
        def process(self, data):
            return bytes(200 << 20)

        def is_finished(self):
            return True

    monkeypatch.setitem(sys.modules, "brotli", types.SimpleNamespace(Decompressor=Old, error=_fake_brotli.error))
    with pytest.raises(BodyDecodeError, match=r"1\.2"):
        decode_body(b"bomb", "br")


def test_a_real_br_body_and_bomb():
    import brotli  # a test dependency, so this always runs

    from ctxscope.proxy.wire.decoding import DecodedTooLarge

    assert decode_body(brotli.compress(b"hello " * 1000), "br") == b"hello " * 1000
    with pytest.raises(DecodedTooLarge):
        decode_body(brotli.compress(bytes(8 << 20), quality=1), "br", max_size=4 << 20)


def _gzip_zeros(n: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(c.compress(b"\0" * (8 << 20)) for _ in range(n // (8 << 20))) + c.flush()


@pytest.mark.slow
def test_a_bomb_over_the_default_limit_is_refused_without_holding_its_output():
    import tracemalloc

    from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE, KEEP_BYTES, DecodedTooLarge

    bomb = _gzip_zeros(DEFAULT_MAX_SIZE + (16 << 20))  # a few hundred KB that inflate past the limit
    assert len(bomb) < 200_000 and DEFAULT_MAX_SIZE == 134217728
    tracemalloc.start()
    try:
        with pytest.raises(DecodedTooLarge, match="decoded size over limit"):
            decode_body(bomb, "gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < KEEP_BYTES + (8 << 20)  # never the limit's worth, let alone the bomb's


def test_a_body_between_the_kept_bytes_and_the_limit_is_decoded_whole():
    from ctxscope.proxy.wire.decoding import KEEP_BYTES

    body = b"0123456789abcdef" * ((KEEP_BYTES + (8 << 20)) // 16)
    for encoding, data in (("gzip", gzip.compress(body, 1)), ("zstd", zstd.compress(body))):
        assert decode_body(data, encoding, max_size=KEEP_BYTES * 2) == body
