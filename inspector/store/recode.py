"""Reproduce a client's compressed body from its decoded content, so deltas work on compressed bodies.

Compressed bytes of two bodies that share a 100 KB prefix share almost nothing, so storing the
raw zstd/gzip body of every call would defeat the delta store. Compressors are deterministic for
a given level, so we look for a *recipe* (coding + level, plus the gzip header as sent) that turns
the decoded body back into exactly the raw bytes. When one is found the store keeps the decoded
body (delta-friendly) and the recipe; when none is, it keeps the raw bytes. A recipe is only ever
used after it was checked to reproduce the raw bytes byte for byte.
"""

from __future__ import annotations

import sys
import zlib

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

# Levels in the order worth trying: library defaults first, then the rest of the cheap ones.
_ZSTD_LEVELS = (3, 1, 2, 4, 5, 6, 7, 8, 9, -1, 0)
_ZLIB_LEVELS = (6, 9, 1, 5, 4, 3, 2, 7, 8)
_MAX_TRIES_SIZE = 4 * 2**20  # above this, only try the recipe that worked last time and the defaults


def apply_recipe(decoded: bytes, recipe: str) -> bytes:
    """Compress ``decoded`` per ``recipe`` ("zstd:3:cs", "gzip:6:<header hex>", "zlib:6", "deflate:6")."""
    kind, level_s, *rest = recipe.split(":")
    level = int(level_s)
    if kind == "zstd":
        flags = rest[0] if rest else ""
        options: dict[int, int] = {zstd.CompressionParameter.compression_level: level}
        if "c" in flags:
            options[zstd.CompressionParameter.checksum_flag] = 1
        if "s" in flags:  # streamed: the frame header carries no content size
            zc = zstd.ZstdCompressor(options=options)
            return zc.compress(decoded) + zc.flush()
        return zstd.compress(decoded, options=options)
    if kind == "gzip":
        header = bytes.fromhex(rest[0])
        c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        body = c.compress(decoded) + c.flush()
        trailer = (zlib.crc32(decoded) & 0xFFFFFFFF).to_bytes(4, "little") + (len(decoded) & 0xFFFFFFFF).to_bytes(
            4, "little"
        )
        return header + body + trailer
    if kind == "zlib":
        return zlib.compress(decoded, level)
    if kind == "deflate":
        c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(decoded) + c.flush()
    raise ValueError(f"unknown recipe {recipe!r}")


def _candidates(raw: bytes, coding: str) -> list[str]:
    if coding == "zstd":
        if len(raw) < 6 or raw[:4] != b"\x28\xb5\x2f\xfd":
            return []
        descriptor = raw[4]
        has_size = descriptor >> 6 or descriptor & 0x20
        flags = ("c" if descriptor & 0x04 else "") + ("" if has_size else "s")
        return [f"zstd:{lv}:{flags}" if flags else f"zstd:{lv}" for lv in _ZSTD_LEVELS]
    if coding in ("gzip", "x-gzip"):
        # Only the plain 10-byte header (no file name, comment or extra field) is reproducible.
        if len(raw) < 18 or raw[:3] != b"\x1f\x8b\x08" or raw[3] != 0:
            return []
        return [f"gzip:{lv}:{raw[:10].hex()}" for lv in _ZLIB_LEVELS]
    if coding == "deflate":
        if len(raw) >= 2 and raw[0] & 0x0F == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0:
            return [f"zlib:{lv}" for lv in _ZLIB_LEVELS]
        return [f"deflate:{lv}" for lv in _ZLIB_LEVELS]
    return []


def find_recipe(
    raw: bytes, decoded: bytes, content_encoding: str | None, hint: str | None = None, *, quick: bool = False
) -> str | None:
    """A recipe that turns ``decoded`` back into exactly ``raw``, or None (store the raw bytes).

    ``hint`` is the recipe that worked last time for this client; ``quick`` tries only the most
    likely candidates (use it when the last search for this client found nothing).
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) != 1 or not raw:
        return None
    candidates = _candidates(raw, codings[0])
    if hint and hint.count(":") >= 1:
        # The same client usually compresses every call alike: try last time's level first.
        level = hint.split(":")[1]
        candidates.sort(key=lambda c: c.split(":")[1] != level)
    if quick or len(decoded) > _MAX_TRIES_SIZE:
        candidates = candidates[:2]
    for recipe in candidates:
        try:
            if apply_recipe(decoded, recipe) == raw:
                return recipe
        except (ValueError, zlib.error, zstd.ZstdError):
            continue
    return None
