"""The daemon's abuse limits: what a client may hold (time, connections, bytes) before it is cut off.

One frozen dataclass for the whole daemon, read from the config file's ``[limits]`` table and
``--limit KEY=VALUE``; the proxy's connection guard and forwarder take their values from it, the
capture side takes ``max_decoded_bytes``. Parsing is here so both sources give the same errors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Any, SupportsFloat, SupportsIndex

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Limits:
    """Every value must be positive; sizes are bytes, times seconds."""

    header_timeout: float = 15.0  # from a connection's first byte (or its opening) to a complete request head
    body_timeout: float = 30.0  # a request body that brings less than BODY_PROGRESS bytes in this long is cut
    keepalive_timeout: float = 75.0  # an idle keep-alive connection is closed after this long
    max_connections: int = 512  # client connections at once, CONNECT tunnels included; more are answered 503
    tunnel_idle_timeout: float = 300.0  # a blind CONNECT tunnel with no byte either way for this long is closed
    max_body_bytes: int = 256 * 2**20  # a larger request body gets a provider-shaped 413
    max_decoded_bytes: int = 128 * 2**20  # a body decoding to more is stored as sent, not analysed
    shutdown_grace: float = 60.0  # how long stopping waits for open calls before cutting them
    max_spool_bytes: int = 2**40  # a cap on the unstored bytes the spool holds; by default its disk decides
    spool_disk_reserve: int = 2**30  # the spool leaves this (or 5% of its disk) free; past it calls drop
    idle_release: float = 60.0  # idle seconds before the writer child lets go of its caches (reads: 5 s at most)

    def with_values(self, values: dict[str, object]) -> Limits:
        """A copy with ``values`` (key -> number or text) applied; ValueError names the bad one."""
        # Each value is of its own field's kind (parse_value checks it), which one type cannot say.
        changes: dict[str, Any] = {key: parse_value(key, value) for key, value in values.items()}
        return replace(self, **changes)


# Bytes that count as progress of a request body within one body_timeout: a trickle of a few bytes
# a second would otherwise hold a connection forever (a legitimate upload sends far more).
BODY_PROGRESS = 16 * 2**10

_KINDS = {f.name: f.type for f in fields(Limits)}
KEYS = tuple(_KINDS)


def parse_value(key: str, value: object) -> float | int:
    """The value of one limit, from TOML (number or text) or the command line (text)."""
    kind = _KINDS.get(key)
    if kind is None:
        raise ValueError(f"unknown limit {key!r}; known limits: {', '.join(KEYS)}")
    if isinstance(value, bool):
        raise ValueError(f"limit {key} must be a number, got {value!r}")
    if kind == "int":
        number = _size(value) if isinstance(value, str) else value
        if isinstance(number, float) and number.is_integer():
            number = int(number)
        if not isinstance(number, int) or number <= 0:
            raise ValueError(f"limit {key} must be a positive whole number, got {value!r}")
        return number
    try:
        if not isinstance(value, str | bytes | SupportsFloat | SupportsIndex):
            raise TypeError(value)
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"limit {key} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"limit {key} must be a positive number of seconds, got {value!r}")
    return seconds


def _size(text: str) -> int | float | None:
    """'1048576', '256MiB', '64k', '1.5G' (binary units) -> bytes; None when unreadable."""
    match = _SIZE.match(text)
    if match is None:
        return None
    number = float(match.group(1)) * _UNITS[match.group(2).lower()]
    return int(number) if number.is_integer() else number


def parse_limit_option(text: str) -> tuple[str, float | int]:
    """KEY=VALUE as given to --limit."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key or not value.strip():
        raise ValueError(f"expected KEY=VALUE for --limit, got {text!r}; known limits: {', '.join(KEYS)}")
    return key, parse_value(key, value.strip())
