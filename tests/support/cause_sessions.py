"""The per-cause sessions of ``bench/advisor_probe/advisor_sessions.py``: one builder for the bench
and the tests, so both measure the same sessions (the bench may not import the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "advisor_probe"))

from advisor_sessions import (
    CAUSES,
    PROVIDERS,
    bodies,
    exchanges,
    expected,
    times,
)

__all__ = ["CAUSES", "PROVIDERS", "bodies", "exchanges", "expected", "times"]
