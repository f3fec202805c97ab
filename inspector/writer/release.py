"""The writer child's memory: one malloc arena, and what it lets go of once it has been idle.

A daemon left running all day should not hold what a burst of traffic made it build: once the
child has stored everything and no call came for ``IDLE_RELEASE`` seconds, its writer thread drops
the token engine, the per-session caches and the analyzers' memory of recent calls, all of which
the next call rebuilds from the store, and gives the heap back to the system
(docs/architecture.md, "Memory").
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Sequence

import sqlite_utils

from ctxscope.inspector.store import blobs
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.ingest import IngestState
from ctxscope.vocab.tokens import release_encoding, release_heap

IDLE_RELEASE = 60.0  # seconds of silence, everything stored, before the child lets go of its caches
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def one_arena() -> None:
    """One malloc arena for the process (glibc's ``mallopt(M_ARENA_MAX, 1)``; elsewhere nothing).

    glibc gives each thread that allocates its own arena; the writer thread's kept ~11 MB of free
    but fragmented heap that ``malloc_trim`` could not give back. The child's threads mostly take
    turns on the GIL, so sharing one arena costs next to no waiting (the CPU per call did not
    change within the noise). Call it before threads start."""
    try:
        os.confstr("CS_GNU_LIBC_VERSION")
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, 1)


def release(db: sqlite_utils.Database | None, state: IngestState | None, analyzers: Sequence[object]) -> None:
    """Let go of everything the next calls can rebuild; run by the writer thread between batches.

    Analyzers with a ``release()`` method forget what they keep of recent calls (they reload a
    session's latest calls from the store when it comes back); the store's bases and parsed bodies
    are reloaded the same way, its zstd dictionaries by id, and the token engine is built again
    (~0.3 s of CPU) by the next count."""
    for analyzer in analyzers:
        forget = getattr(analyzer, "release", None)
        if callable(forget):
            forget()
    if state is not None:
        state.bases.clear()
        state.bodies.clear()
    blobs.forget_dictionaries()
    if db is not None:
        store.shrink_memory(db)
    release_encoding()
    gc.collect()
    release_heap()
