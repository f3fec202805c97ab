"""Reading a request body within limits, and undoing its Content-Encoding ourselves.

The simulator's server does not let aiohttp decompress (a corrupt gzip there surfaced as a
plain-text 500, and brotli without its module as "install Brotli"): the body arrives as sent,
and this module decodes gzip, deflate, zstd and (when its module is installed) brotli, never
producing more than the size limit, so a small bomb cannot inflate to gigabytes. Every failure is
a ``BodyError`` with the status and words the caller answers in its provider's own error shape.
"""

from __future__ import annotations

import sys
import zlib
from types import ModuleType

from aiohttp import web

_zstd: ModuleType | None
try:  # mypy checks the branch of its python_version only
    if sys.version_info >= (3, 14):
        from compression import zstd as _zstd_module
    else:
        from backports import zstd as _zstd_module
    _zstd = _zstd_module
except ImportError:  # pragma: no cover - depends on the Python version
    _zstd = None

try:
    import brotli as _brotli
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        import brotlicffi as _brotli
    except ImportError:
        _brotli = None

_STEP = 1 << 16  # compressed bytes fed to a decoder at a time


class BodyError(Exception):
    """A body the simulator will not take: ``status`` 400 (undecodable) or 413 (too large)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def too_large(limit: int) -> BodyError:
    return BodyError(413, f"Request body too large: the limit is {limit:,} bytes.")


async def read_raw(request: web.Request, limit: int) -> bytes:
    """The body as sent, or BodyError(413) as soon as it is known to exceed ``limit`` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    chunks, total = [], 0
    async for chunk in request.content.iter_any():
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def decode(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """Undo each listed encoding (the last applied first); BodyError on bad data or too much output."""
    data = raw
    for coding in reversed([c.strip().lower() for c in content_encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        try:
            if coding in ("gzip", "x-gzip"):
                data = _zlib(data, 16 + zlib.MAX_WBITS, limit)
            elif coding == "deflate":
                data = _deflate(data, limit)
            elif coding == "zstd":
                data = _zstd_decode(data, limit)
            elif coding == "br":
                data = _brotli_decode(data, limit)
            else:
                raise BodyError(400, f"Unsupported Content-Encoding {coding!r}.")
        except BodyError:
            raise
        except Exception as exc:  # every decoder's own error type means the same: bad data
            raise BodyError(400, f"The request body is not valid {coding} data ({exc}).") from None
    return data


def _zlib(data: bytes, wbits: int, limit: int) -> bytes:
    out = bytearray()
    while True:  # one decoder per gzip member; a body may hold several
        d = zlib.decompressobj(wbits)
        chunk = d.decompress(data, limit + 1 - len(out))
        out += chunk
        while d.unconsumed_tail and len(out) <= limit:
            out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
        if len(out) > limit:
            raise too_large(limit)
        if not d.eof:
            raise BodyError(400, "The request body's compressed data is truncated.")
        data = d.unused_data
        if not data:
            return bytes(out)


def _deflate(data: bytes, limit: int) -> bytes:
    try:
        return _zlib(data, zlib.MAX_WBITS, limit)  # deflate as the RFC means it: a zlib stream
    except zlib.error:
        return _zlib(data, -zlib.MAX_WBITS, limit)  # ... or the raw deflate some clients send


def _zstd_decode(data: bytes, limit: int) -> bytes:
    if _zstd is None:  # pragma: no cover - backports.zstd is a dependency
        raise BodyError(400, "Content-Encoding zstd is not supported by this simulator.")
    out = bytearray()
    while data:  # one decoder per frame
        d = _zstd.ZstdDecompressor()
        out += d.decompress(data, limit + 1 - len(out))
        while not d.eof and not d.needs_input and len(out) <= limit:
            out += d.decompress(b"", limit + 1 - len(out))
        if len(out) > limit:
            raise too_large(limit)
        if not d.eof:
            raise BodyError(400, "The request body's compressed data is truncated.")
        data = d.unused_data
    return bytes(out)


def _brotli_decode(data: bytes, limit: int) -> bytes:
    if _brotli is None:
        raise BodyError(
            400,
            "Content-Encoding br is not supported by this simulator (no brotli module is "
            "installed); send the body uncompressed, gzip or zstd.",
        )
    d = _brotli.Decompressor()
    out = bytearray()
    for i in range(0, len(data), _STEP):  # fed in steps, so output past the limit stops the work early
        out += d.process(data[i : i + _STEP])
        if len(out) > limit:
            raise too_large(limit)
    if hasattr(d, "is_finished") and not d.is_finished():
        raise BodyError(400, "The request body's compressed data is truncated.")
    return bytes(out)
