"""The UI's search: hits from the store's full-text index, with the matches marked for the page."""

from __future__ import annotations

import sqlite_utils

from ctxscope.inspector.store.derived.search import AREAS, HIT_END, HIT_START, search

MAX_HITS = 200


def search_view(db: sqlite_utils.Database, text: str, session: str | None, areas: list[str], limit: int) -> dict:
    """``{"hits": [...], "marks": [start, end]}``: each snippet holds the marks around its matches,
    characters that captured JSON text never holds; the page splits on them into text nodes."""
    unknown = [a for a in areas if a not in AREAS]
    if unknown:
        raise ValueError(f"unknown area {unknown[0]!r}: one of {', '.join(AREAS)}")
    hits = search(db, text, session=session, areas=areas, limit=max(1, min(limit, MAX_HITS)))
    return {"query": text, "hits": hits, "marks": [HIT_START, HIT_END]}
