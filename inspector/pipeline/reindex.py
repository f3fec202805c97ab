"""``ctxscope reindex``: the analysis of stored calls computed again, in the order they were stored.

A fresh analyzer that sees the calls in capture order writes what live analysis would have written
(without any ``clock_offset``); it commits in batches so a long reindex never holds the store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ctxscope.inspector.pipeline.analysis_input import from_row
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.pipeline.session_titles import retitle
from ctxscope.inspector.store import analysis_rows as rows
from ctxscope.inspector.store.db import Db, record_event
from ctxscope.inspector.store.derived import titles

log = logging.getLogger("ctxscope.analysis")


def reindex(db: Db, *, session: str | None = None, analyzer: Analyzer | None = None, batch: int = 200) -> Iterator[str]:
    """Recompute the analysis of stored calls in capture order, yielding each call id when done.

    A call that fails is logged and recorded as ``analysis_failed``; the others go on.
    """
    analyzer = analyzer or Analyzer()
    ids = rows.call_ids(db, session)
    titles_kept = titles.kept(db)
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        with rows.immediate(db):
            touched = set(rows.sessions_of(db, chunk))  # a call may move to another session
            for call_id in chunk:
                try:
                    with db.atomic():
                        analyzer.apply(db, from_row(db, call_id), live=False)
                except Exception as e:
                    log.warning("reindex of call %s failed: %s", call_id, e)
                    record_event(db, "analysis_failed", call_id=call_id, detail=f"reindex: {type(e).__name__}: {e}")
            touched |= set(rows.sessions_of(db, chunk))
            rows.refresh_totals(db, touched)
            if titles_kept:  # the sessions it touched named again: a call may have moved
                retitle(db, touched)
        yield from chunk
