"""What the writer child, and a process that reads the store, let go of once idle.

A daemon left running all day should not hold what a burst of traffic made it build: once the
child has stored everything and no call came for ``IDLE_RELEASE`` seconds (``writer/protocol.py``),
its writer thread drops the token engine, the per-session caches and the analyzers' memory of
recent calls, all of which the next call rebuilds from the store, and gives the heap back to the
system (docs/architecture.md, "Memory"). The daemon's read pool does the same with what big reads
built (``release_reading``, called by ``web/pool.py`` once no read ran for a few seconds).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

from ctxscope.inspector.store import blobs
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.ingest import IngestState
from ctxscope.vocab.heap import release_heap
from ctxscope.vocab.tokens import encoding, release_encoding

SETTLED_BYTES = 4 << 20  # what each cache of bodies keeps once a burst is stored (``trim``)


def release(db: Db | None, state: IngestState | None, analyzers: Sequence[object]) -> None:
    """Let go of everything the next calls can rebuild; run by the writer thread between batches.

    Analyzers with a ``release()`` method forget what they keep of recent calls (they reload a
    session's latest calls from the store when it comes back); the store's bases and parsed bodies
    are reloaded the same way, the ids it knows are looked up again, its zstd dictionaries are
    read by id, and the token engine is built again (~0.2 s of CPU) by the next count."""
    for analyzer in analyzers:
        forget = getattr(analyzer, "release", None)
        if callable(forget):
            forget()
    if state is not None:
        state.bases.clear()
        state.bodies.clear()
        state.ids.clear()
    blobs.forget_dictionaries()
    if db is not None:
        store.shrink_memory(db)
    release_encoding()
    gc.collect()
    release_heap()


def trim(state: IngestState | None, analyzers: Sequence[object], max_bytes: int | None = None) -> None:
    """Shrink what a burst filled to ``max_bytes`` per cache, keeping the latest sessions' entries,
    and give the heap back: run by the writer thread once its backlog drained, so the child does not
    hold a burst's bodies until the idle release (the caches' own bounds are for a burst's speed)."""
    max_bytes = SETTLED_BYTES if max_bytes is None else max_bytes
    for analyzer in analyzers:  # one that cannot shrink forgets its recent calls: they come back from the store
        shrink, forget = getattr(analyzer, "trim", None), getattr(analyzer, "release", None)
        if callable(shrink):
            shrink(max_bytes)
        elif callable(forget):
            forget()
    if state is not None:
        state.bases.shrink(max_bytes)
        state.bodies.shrink(max_bytes)
    gc.collect()
    release_heap()


def release_reading() -> None:
    """Let go of what reads of the store keep between them: the token engine (~44 MB, built again
    by the next count in ~0.2 s), the diff's remembered counts and the zstd dictionaries. The
    caller closes its idle connections first, then collects (one full collection holds the GIL
    ~35 ms in a daemon after big reads: once per idle spell) and gives the heap back."""
    from ctxscope.inspector.analyses.diff import forget_counts  # readers only: the writer child never diffs

    forget_counts()
    blobs.forget_dictionaries()
    encoding.cache_clear()
