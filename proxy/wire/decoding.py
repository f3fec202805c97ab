"""Undo a body's Content-Encoding for the capture (the forwarded bytes stay untouched).

Clients compress request bodies too (Pi sends zstd), so the store decodes both directions.
Decoding is incremental, piece by piece, and stops at ``max_size``: a small hostile body (611 KB
of gzip inflates to 600 MB) costs at most KEEP_BYTES of memory, since past that the decoder only
counts what it would produce; a body that turns out to be within the limit is then decoded again,
keeping everything (only bodies between KEEP_BYTES and the limit pay that second pass).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterator
from types import ModuleType

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd as _zstd
else:
    from backports import zstd as _zstd

DEFAULT_MAX_SIZE = 128 * 2**20  # the default cap on decoded size for analysis
PIECE = 1 << 20  # decoder output per step
KEEP_BYTES = 32 * 2**20  # decoded output held while the total may still exceed the limit


class BodyDecodeError(ValueError):
    """The body cannot be decoded with its declared Content-Encoding."""


class DecodedTooLarge(BodyDecodeError):
    """The decoded body would exceed the size limit: it is kept as sent and analysed no further."""


def decode_body(
    data: bytes,
    content_encoding: str | None,
    max_size: int = DEFAULT_MAX_SIZE,
    *,
    allow_truncated: bool = False,
) -> bytes:
    """Decode ``data`` per ``content_encoding`` ("gzip", "zstd, gzip", ...), last coding first.

    With ``allow_truncated`` a body cut off mid-stream (upstream reset) yields the bytes decoded
    so far instead of an error; corrupt data still raises. Every stage is capped at ``max_size``
    (DecodedTooLarge).
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not data:  # e.g. a 204 or a HEAD answer that still names its encoding
        return b""
    for coding in reversed(codings):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise BodyDecodeError(f"unsupported content-encoding {coding!r}")
        data = decoder(bytes(data), max_size, allow_truncated)
    return data


def _too_big(max_size: int) -> DecodedTooLarge:
    return DecodedTooLarge(f"decoded size over limit (more than the {max_size} byte limit)")


def _truncated(coding: str) -> BodyDecodeError:
    return BodyDecodeError(f"truncated {coding} data")


def _collect(pieces: Callable[[], Iterator[bytes]], max_size: int) -> bytes:
    """The decoded body from a fresh run of ``pieces``, within ``max_size`` (see module docstring)."""
    kept: list[bytes] = []
    total, keeping = 0, True
    for piece in pieces():
        total += len(piece)
        if total > max_size:
            raise _too_big(max_size)
        if keeping:
            kept.append(piece)
            if total > KEEP_BYTES:
                kept, keeping = [], False
    return b"".join(kept) if keeping else b"".join(pieces())


def _zlib_pieces(data: bytes, wbits: int, coding: str, allow_truncated: bool) -> Iterator[bytes]:
    """Decode one or more concatenated zlib/gzip members, PIECE bytes at a time."""
    while True:
        d = zlib.decompressobj(wbits)
        tail = data
        try:
            while not d.eof:
                out = d.decompress(tail, PIECE)
                tail = d.unconsumed_tail
                if out:
                    yield out
                elif not tail:
                    break  # the input ended before the stream did
            rest = b"" if d.eof else d.flush()
        except zlib.error as e:
            raise BodyDecodeError(f"invalid {coding} data: {e}") from None
        if not d.eof:
            if not allow_truncated:
                raise _truncated(coding)
            if rest:
                yield rest
            return
        data = d.unused_data
        # Trailing NUL padding after the last gzip member is common and harmless.
        if not data or not data.strip(b"\0"):
            return


def _gzip(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    return _collect(lambda: _zlib_pieces(data, 16 + zlib.MAX_WBITS, "gzip", allow_truncated), max_size)


def _deflate(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    # RFC 9110 says zlib-wrapped, but many servers send raw deflate: sniff the zlib header.
    if len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0:
        try:
            return _collect(lambda: _zlib_pieces(data, zlib.MAX_WBITS, "deflate", allow_truncated), max_size)
        except BodyDecodeError as e:
            if not str(e).startswith("invalid"):
                raise
    return _collect(lambda: _zlib_pieces(data, -zlib.MAX_WBITS, "deflate", allow_truncated), max_size)


def _zstd_pieces(data: bytes, allow_truncated: bool) -> Iterator[bytes]:
    """Decode concatenated zstd frames, with or without a declared content size, PIECE bytes at a time."""
    while data:
        d = _zstd.ZstdDecompressor()
        try:
            out = d.decompress(data, PIECE)
            while True:
                if out:
                    yield out
                if d.eof or d.needs_input:
                    break
                out = d.decompress(b"", PIECE)
        except _zstd.ZstdError as e:
            raise BodyDecodeError(f"invalid zstd data: {e}") from None
        if not d.eof:
            if not allow_truncated:
                raise _truncated("zstd")
            return
        data = d.unused_data


def _zstd_decode(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    return _collect(lambda: _zstd_pieces(data, allow_truncated), max_size)


def _brotli_pieces(brotli: ModuleType, data: bytes, allow_truncated: bool) -> Iterator[bytes]:
    """Decode a brotli stream, PIECE bytes at a time (brotli 1.2's output limit; an older brotli
    cannot bound its output, so a bomb would be inflated whole: it is not decoded)."""
    d = brotli.Decompressor()
    try:
        try:
            out = d.process(data, output_buffer_limit=PIECE)
        except TypeError:
            raise BodyDecodeError(
                "br decoding needs brotli 1.2 or later (an older one cannot bound its output)"
            ) from None
        while True:
            if out:
                yield out
            if d.is_finished() or d.can_accept_more_data():
                break
            out = d.process(b"", output_buffer_limit=PIECE)
    except brotli.error as e:
        raise BodyDecodeError(f"invalid br data: {e}") from None
    if not d.is_finished() and not allow_truncated:
        raise _truncated("br")


def _brotli(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    try:
        import brotli
    except ImportError:
        raise BodyDecodeError("br decoding needs the brotli package") from None
    return _collect(lambda: _brotli_pieces(brotli, data, allow_truncated), max_size)


_DECODERS = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "zstd": _zstd_decode,
    "br": _brotli,
}
