"""Time-ordered call ids: sortable as text, unique without coordination."""

from __future__ import annotations

import os
import random
import threading
import time

# Seeded from the OS once (and again in a forked child), so the hot path makes no system call.
_random = random.Random(os.urandom(16))
_lock = threading.Lock()
_last_ns = 0
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(16)))


def new_call_id() -> str:
    """16 hex digits of nanoseconds since the epoch, then 6 random hex digits.

    The nanoseconds never repeat within a process (a clash bumps them by one), so ids from one
    process are unique and in order; the random digits keep processes apart.
    """
    global _last_ns
    with _lock:
        ns = time.time_ns()
        if ns <= _last_ns:
            ns = _last_ns + 1
        _last_ns = ns
    return f"{(ns << 24) | _random.getrandbits(24):022x}"  # (one format, not two: the same digits)
