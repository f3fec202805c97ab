"""Exact o200k_base token counts, offline: tiktoken's engine with the bundled, hash-pinned ranks.

``tiktoken.get_encoding("o200k_base")`` downloads its ranks file at run time; we ship that file
(gzipped, from tiktoken's published source, MIT) and check its sha256 before use, so counting
never touches the network. This module imports nothing else of ours, so the agent may use it too.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from importlib.resources import files

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
    raw = gzip.decompress(files("ctxscope.inspector").joinpath("data/o200k_base.tiktoken.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != O200K_SHA256:
        raise RuntimeError("bundled o200k_base.tiktoken failed its sha256 check")
    return raw


def load_ranks() -> dict[bytes, int]:
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in ranks_file_bytes().splitlines() if line)
    }


@functools.lru_cache(maxsize=None)
def encoding():
    """The exact o200k_base encoder, built once per process (~0.3 s). Thread-safe."""
    import tiktoken

    return tiktoken.Encoding(
        name="o200k_base", pat_str=O200K_PAT, mergeable_ranks=load_ranks(), special_tokens=O200K_SPECIAL
    )


def count_tokens(text: str) -> int:
    """Exact o200k token count; special-token strings count as plain text and never raise."""
    if not text:
        return 0
    return len(encoding().encode_ordinary(text))
