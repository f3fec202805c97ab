"""Exact o200k_base token counts, offline: tiktoken's engine with the bundled, hash-pinned ranks.

``tiktoken.get_encoding("o200k_base")`` downloads its ranks file at run time; we ship that file
(gzipped, from tiktoken's published source, MIT) and check its sha256 before use, so counting
never touches the network. It imports nothing of ours outside vocab/, so the agent, the simulator and the
inspector all may use it.
"""

from __future__ import annotations

import binascii
import functools
import gc
import gzip
import hashlib
from importlib.resources import files
from typing import TYPE_CHECKING

from ctxscope.vocab.heap import release_heap

if TYPE_CHECKING:
    import tiktoken

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def ranks_file_bytes() -> bytes:
    """The decompressed ranks file, verified against tiktoken's expected hash."""
    raw = gzip.decompress(files("ctxscope.vocab").joinpath("data/o200k_base.tiktoken.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != O200K_SHA256:
        raise RuntimeError("bundled o200k_base.tiktoken failed its sha256 check")
    return raw


def load_ranks() -> dict[bytes, int]:
    """Each token (base64) by its rank. The pinned file lists them in rank order, 0 to 199,997, so
    the ranks are positions: 0.08 s with the file's read and hash check, against 0.13 s parsing
    each line as tiktoken does; the writer pays it again after each idle release
    (docs/architecture.md, "Memory")."""
    encoded = ranks_file_bytes().split()[0::2]
    return dict(zip(map(binascii.a2b_base64, encoded), range(len(encoded)), strict=True))


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The exact o200k_base encoder, built once per process (~0.2 s). Thread-safe.

    Its engine keeps its own copy of the 200K ranks; the Python dict it was built from (~25 MB,
    kept by ``Encoding`` only to pickle itself, which we never do) is let go, and so is the heap
    the build used (docs/architecture.md, "Memory")."""
    import tiktoken

    enc = tiktoken.Encoding(
        name="o200k_base", pat_str=O200K_PAT, mergeable_ranks=load_ranks(), special_tokens=O200K_SPECIAL
    )
    enc._mergeable_ranks = {}  # counting and decoding use the engine's copy
    gc.collect()
    release_heap()
    return enc


def release_encoding() -> None:
    """Let go of the encoder (its engine holds ~44 MB): an idle writer child falls back to its
    start-up size, and the next count builds it again (docs/architecture.md, "Memory")."""
    if encoding.cache_info().currsize:
        encoding.cache_clear()
        gc.collect()
        release_heap()


# BPE cost grows faster than linearly with the length of one pre-token piece (50 MB of "x" takes
# tens of seconds), so long texts are counted in windows cut after a newline that starts a new
# piece. That is exact for text with line breaks; only a single line longer than a window is cut
# mid-line, where the count may differ by a token or two per cut.
_WINDOW = 1 << 16
_SMALL = 4 * _WINDOW


def _cut(text: str, start: int) -> int:
    end = start + _WINDOW
    if end >= len(text):
        return len(text)
    low = start + _WINDOW // 2
    pos = text.rfind("\n", low, end)
    while pos != -1:
        if not text[pos + 1].isspace():
            return pos + 1
        pos = text.rfind("\n", low, pos)
    return end


def count_tokens(text: str) -> int:
    """o200k token count; special-token strings count as plain text and never raise."""
    if not text:
        return 0
    enc = encoding()
    if len(text) <= _SMALL:
        return len(enc.encode_ordinary(text))
    total, start = 0, 0
    while start < len(text):
        end = _cut(text, start)
        total += len(enc.encode_ordinary(text[start:end]))
        start = end
    return total
