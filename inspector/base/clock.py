"""Timestamps as the store writes them: fixed-width ISO 8601 UTC text.

Its own module, free of SQLite, so the daemon's side of the writer can stamp its errors without
loading the store (docs/architecture.md, "Memory").
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import overload

_FIRST_SECOND, _PAST_LAST_SECOND = -62135596800.0, 253402300800.0  # 0001-01-01 and 10000-01-01 UTC


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: None) -> None: ...
@overload
def iso(ts: float | None) -> str | None: ...


def iso(ts: float | None) -> str | None:
    """Unix seconds as fixed-width ISO 8601 UTC, so text order is time order.

    The text ``datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` gives (the same
    rounding of microseconds, half to even), in half its time: the writer writes several per call."""
    if ts is None:
        return None
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    global _last_second
    last = _last_second
    if last[0] != whole:
        utc = time.gmtime(whole)
        if not _FIRST_SECOND <= whole < _PAST_LAST_SECOND:
            raise ValueError(f"year out of range for {ts!r}")  # as datetime says: the text would not be fixed-width
        last = _last_second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", utc))
    return f"{last[1]}.{micros:06d}Z"


# The last second formatted: a call's timestamps mostly fall in one second (one tuple, replaced whole,
# so threads see either the old one or the new one).
_last_second: tuple[float, str] = (math.nan, "")


def now_iso() -> str:
    return iso(time.time())


def unix_time(text: str | None) -> float:
    """The inverse of ``iso``: unix seconds from the store's text (0.0 for none)."""
    if not text:
        return 0.0
    stamp = datetime.fromisoformat(text)  # ours end in "Z" (3.11 reads that as UTC)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
