"""JSON text for values we built or parsed ourselves, with the C encoder made once.

``json.JSONEncoder(...).encode`` makes a new C encoder on every call (``iterencode``), which
costs about as much as encoding a small object: the writer encodes several small objects per
stored call (docs/architecture.md, "One INSERT per call"). ``encoder`` makes that C encoder
once. It leaves out the check for circular references: what it is given comes from
``json.loads`` or from the analysis' own dicts and lists, never a cycle (one would raise
RecursionError instead of ValueError). The text is the one ``JSONEncoder.encode`` gives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# None on an interpreter without the C accelerator: then the plain encoder is used
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def encoder(
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (",", ":"),
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str]:
    """``json.JSONEncoder(sort_keys=..., separators=..., ensure_ascii=..., default=...).encode``,
    made once; thread-safe (the C encoder keeps no state between calls without the circular check)."""
    plain = json.JSONEncoder(
        sort_keys=sort_keys, separators=separators, ensure_ascii=ensure_ascii, default=default, check_circular=False
    )
    if _make_encoder is None:
        return plain.encode
    strings = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    item_separator, key_separator = separators
    chunks = _make_encoder(None, plain.default, strings, None, key_separator, item_separator, sort_keys, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return strings(value)
        return "".join(chunks(value, 0))

    return encode
