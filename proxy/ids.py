"""Time-ordered call ids: sortable as text, unique without coordination."""

from __future__ import annotations

import os
import time


def new_call_id() -> str:
    """16 hex digits of nanoseconds since the epoch, then 6 random hex digits."""
    return f"{time.time_ns():016x}{os.urandom(3).hex()}"
