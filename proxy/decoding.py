"""Undo a body's Content-Encoding for the capture (the forwarded bytes stay untouched).

Clients compress request bodies too (Pi sends zstd), so the store decodes both directions.
Every decoder streams with an output cap, so a small hostile body cannot expand into gigabytes
inside the writer thread.
"""

from __future__ import annotations

import zlib

try:  # Python 3.14+
    from compression import zstd as _zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the interpreter
    from backports import zstd as _zstd  # type: ignore[no-redef]

DEFAULT_MAX_SIZE = 512 * 2**20


class BodyDecodeError(ValueError):
    """The body cannot be decoded with its declared Content-Encoding."""


def decode_body(
    data: bytes,
    content_encoding: str | None,
    max_size: int = DEFAULT_MAX_SIZE,
    *,
    allow_truncated: bool = False,
) -> bytes:
    """Decode ``data`` per ``content_encoding`` ("gzip", "zstd, gzip", ...), last coding first.

    With ``allow_truncated`` a body cut off mid-stream (upstream reset) yields the bytes decoded
    so far instead of an error; corrupt data still raises.
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


def _too_big(max_size: int) -> BodyDecodeError:
    return BodyDecodeError(f"decoded body exceeds the {max_size} byte limit")


def _truncated(coding: str) -> BodyDecodeError:
    return BodyDecodeError(f"truncated {coding} data")


def _zlib_stream(data: bytes, wbits: int, max_size: int, coding: str, allow_truncated: bool) -> bytes:
    """Decode one or more concatenated zlib/gzip members."""
    out: list[bytes] = []
    total = 0
    while True:
        d = zlib.decompressobj(wbits)
        try:
            piece = d.decompress(data, max_size - total + 1)
        except zlib.error as e:
            if out and not data.strip(b"\0"):
                break
            raise BodyDecodeError(f"invalid {coding} data: {e}") from None
        total += len(piece)
        if total > max_size:
            raise _too_big(max_size)
        out.append(piece)
        if not d.eof:
            try:
                tail = d.flush()
            except zlib.error as e:  # pragma: no cover - flush of a partial stream rarely fails
                raise BodyDecodeError(f"invalid {coding} data: {e}") from None
            if len(tail) + total > max_size:
                raise _too_big(max_size)
            if not allow_truncated:
                raise _truncated(coding)
            out.append(tail)
            break
        data = d.unused_data
        # Trailing NUL padding after the last gzip member is common and harmless.
        if not data or not data.strip(b"\0"):
            break
    return b"".join(out)


def _gzip(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    return _zlib_stream(data, 16 + zlib.MAX_WBITS, max_size, "gzip", allow_truncated)


def _deflate(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    # RFC 9110 says zlib-wrapped, but many servers send raw deflate: sniff the zlib header.
    if len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0:
        try:
            return _zlib_stream(data, zlib.MAX_WBITS, max_size, "deflate", allow_truncated)
        except BodyDecodeError as e:
            if not str(e).startswith("invalid"):
                raise
    return _zlib_stream(data, -zlib.MAX_WBITS, max_size, "deflate", allow_truncated)


def _zstd_decode(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    """Decode concatenated zstd frames, with or without a declared content size."""
    out: list[bytes] = []
    total = 0
    while data:
        d = _zstd.ZstdDecompressor()
        try:
            piece = d.decompress(data, max_size - total + 1)
        except _zstd.ZstdError as e:
            raise BodyDecodeError(f"invalid zstd data: {e}") from None
        total += len(piece)
        if total > max_size:
            raise _too_big(max_size)
        out.append(piece)
        if not d.eof:
            if not allow_truncated:
                raise _truncated("zstd")
            break
        data = d.unused_data
    return b"".join(out)


def _brotli(data: bytes, max_size: int, allow_truncated: bool) -> bytes:
    try:
        import brotli  # type: ignore[import-not-found]
    except ImportError:
        raise BodyDecodeError("br decoding needs the brotli package") from None
    d = brotli.Decompressor()
    try:
        try:
            out = d.process(data, output_buffer_limit=max_size + 1)
        except TypeError:  # brotli < 1.2 has no output limit
            out = d.process(data)
    except brotli.error as e:
        raise BodyDecodeError(f"invalid br data: {e}") from None
    if len(out) > max_size:
        raise _too_big(max_size)
    if not d.is_finished() and not allow_truncated:
        raise _truncated("br")
    return out


_DECODERS = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "zstd": _zstd_decode,
    "br": _brotli,
}
