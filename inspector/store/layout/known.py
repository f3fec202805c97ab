"""The ids of stored rows the writer already knows, so that storing a call asks the store less.

Storing a call looks up rows by content (a header set, a chunk, a search segment) and numbers the
call in its session; the answers rarely change between two calls, and only by the writer's own
doing, so it keeps them (docs/architecture.md, "One INSERT per call").
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ctxscope.inspector.store.db import Db

_K = TypeVar("_K")


_generations = itertools.count(1)  # unique across instances: a writer that reconnects starts a new one


class KnownIds:
    """Ids this writer stored or looked up, so the next call need not ask the store again: header
    sets (by their pairs), chunks and search segments (by hash), the segments each session's search
    index holds, each session's last seq.

    Only the writer adds rows, so they stay true until one of its calls or batches rolls back, it
    deletes a session, or another connection commits (``PRAGMA data_version``): each of those
    clears them all and gives ``generation`` a value never used before (so what an analyzer noted
    under the old one is checked again). Each map is bounded: one that outgrows ``limit`` starts
    again empty.
    """

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.generation = next(_generations)
        self.header_sets: dict[tuple[Any, ...], int] = {}  # by their (name, value or None) pairs
        self.chunks: dict[bytes, int] = {}
        self.segments: dict[bytes, int] = {}
        self.occurrences: dict[tuple[int, str], int] = {}  # (segment, session) the search index holds
        self._seqs: dict[str, int] = {}
        self.zstd_dict: tuple[int | None] | None = None  # (the newest dictionary's id, or None: none yet); None: ask
        self._data_version: int | None = None
        # (segment id, text) for FTS5, inserted all at once before the commit (``defer_terms``): FTS5
        # writes an index segment at every savepoint, so inserting call by call costs a segment per call
        self.defer_terms = False
        self.terms: list[tuple[int, str]] = []

    def next_seq(self, db: Db, session: str) -> int:
        """The seq of the session's next call, which the caller inserts."""
        last = self._seqs.get(session)
        if last is None:
            last = db.execute("SELECT COALESCE(MAX(seq), 0) FROM calls WHERE session = ?", [session]).fetchone()[0]
            if len(self._seqs) >= self.limit:
                self._seqs.clear()
        self._seqs[session] = last + 1
        return last + 1

    def keep(self, known: dict[_K, int], key: _K, value: int) -> None:
        """Remember ``key`` -> ``value`` in one of the maps above."""
        if len(known) >= self.limit:
            known.clear()
        known[key] = value

    def check(self, db: Db) -> bool:
        """At the start of a write transaction: forget everything if another connection committed
        (True: it did)."""
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self.clear()
            changed = self._data_version is not None
            self._data_version = version
            return changed
        return False

    def drop_terms(self, mark: int) -> None:
        """Forget the terms held back since ``len(self.terms)`` was ``mark`` (their savepoint rolled back)."""
        del self.terms[mark:]

    def clear(self) -> None:
        """Forget the ids (the terms held back stay: the calls before a rolled-back one keep theirs)."""
        self.generation = next(_generations)
        for known in (self.header_sets, self.chunks, self.segments, self.occurrences, self._seqs):
            known.clear()
        self.zstd_dict = None
