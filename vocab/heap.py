"""How the C heap of a long-running process of ours behaves (glibc's malloc; elsewhere nothing).

Two settings and one action (docs/architecture.md, "Memory"):
- one malloc arena for all threads (``M_ARENA_MAX``), so a burst's free pages sit in one place;
- large buffers (a 1 MB body read off a socket, a pipe or the spool, and its copies) come from that
  heap, not from a fresh ``mmap`` each (``M_MMAP_THRESHOLD``), and freeing them does not shrink
  the heap at once (``M_TRIM_THRESHOLD``): with glibc's defaults every 1 MB buffer was mapped,
  faulted in page by page and unmapped again, about 0.9 ms of CPU per body copy;
- ``release_heap`` gives the free pages back once a burst is over (the daemon and the writer
  child call it when they go idle), so the heap's size after a burst is not kept.

``resident_bytes`` is how a process sees what that left it holding (the writer child compares it
with its rest to let go early).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters
LARGE_FROM_HEAP = 32 << 20  # buffers up to this size come from the heap (glibc's maximum)
KEEP_FREE = 16 << 20  # free bytes the heap may keep at its top between two ``release_heap``


def _libc_function(name: str) -> Callable[..., Any] | None:
    try:
        return ctypes.CDLL(None)[name]  # the symbols this process already loaded
    except (OSError, AttributeError):
        return None


def tune_heap(arenas: int) -> None:
    """Set this process's heap up for a long life of large buffers: at most ``arenas`` malloc
    arenas, large buffers from the heap, free pages kept until ``release_heap``. Call it first
    thing, before any thread starts."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return
    mallopt(_M_ARENA_MAX, arenas)
    mallopt(_M_MMAP_THRESHOLD, LARGE_FROM_HEAP)
    mallopt(_M_TRIM_THRESHOLD, KEEP_FREE)


def release_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``)."""
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)


def resident_bytes() -> int | None:
    """This process's resident set size (Linux's ``/proc/self/statm``, ~20 µs); None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
