"""How piece lists and page ids are packed into a body row or a page: unsigned LEB128 varints.

Most chunk ids, offsets and lengths take one to three bytes instead of four (docs/architecture.md,
"Body storage"). Pure functions, no database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxscope.inspector.store.layout.pieces import Piece


def varints(numbers: Iterable[int]) -> bytes:
    """Unsigned LEB128: most ids, offsets and lengths take one to three bytes instead of four."""
    out = bytearray()
    for n in numbers:
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def numbers(packed: bytes | None) -> list[int]:
    out: list[int] = []
    n = shift = 0
    for byte in packed or b"":
        n |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            out.append(n)
            n = shift = 0
    return out


def pack_pieces(pieces: Sequence[Piece]) -> bytes:
    return varints(x for p in pieces for x in p)


def unpack_pieces(packed: bytes | None) -> list[Piece]:
    nums = numbers(packed)
    return list(zip(nums[0::3], nums[1::3], nums[2::3], strict=True))


def pack_ids(ids: Sequence[int]) -> bytes:
    return varints(ids)


def unpack_ids(packed: bytes | None) -> list[int]:
    return numbers(packed)
