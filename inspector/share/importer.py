"""Loading exported calls into a capture database through the writer's ingest, analysed like live ones.

The whole file is read and checked before anything is written, so a malformed file changes
nothing. Calls are stored in capture order; their capture epochs keep their distances (a call that
followed a daemon restart still does), shifted past the database's own. A call whose id the
database already holds is skipped: importing the same file twice stores it once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from ctxscope.inspector.share.exchanges import ANALYSIS_KEYS
from ctxscope.inspector.share.imported import is_marked, mark_imported
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.ingest import Analyzer, IngestState, ingest
from ctxscope.proxy.exchange import Exchange


@dataclass(frozen=True)
class Imported:
    call_id: str
    stored: bool  # False: the database already held it
    analysis_errors: int


def import_calls(
    db_path: Path, calls: Sequence[tuple[Exchange, int | None]], analyzers: Sequence[Analyzer], *, batch: int = 100
) -> Iterator[Imported]:
    """Store and analyse ``calls`` ((exchange, capture epoch or None)), yielding each as it is done."""
    # Every imported call carries the mark (the readers set it; a caller that did not gets it here).
    ordered = sorted(
        ((ex if is_marked(ex) else mark_imported(ex, "file"), epoch) for ex, epoch in calls),
        key=lambda c: (c[0].started_at, c[0].id),
    )
    db = store.connect(db_path)
    try:
        base = store.next_capture_epoch(db)
        known = sorted({e for _, e in ordered if e is not None})
        offset = {e: i for i, e in enumerate(known)}
        top = base
        state = IngestState(base)
        for start in range(0, len(ordered), batch):
            done: list[Imported] = []
            store.begin(db)
            state.ids.check(db)
            try:
                for ex, epoch in ordered[start : start + batch]:
                    if store.is_stored(db, ex.id):
                        done.append(Imported(ex.id, False, 0))
                        continue
                    state.capture_epoch = base + (offset[epoch] if epoch is not None else 0)
                    top = max(top, state.capture_epoch)
                    result = ingest(db, ex, state, analyzers)
                    for name, exc in result.analysis_errors:
                        store.record_event(
                            db, "analysis_failed", call_id=ex.id, detail=f"import: {name}: {type(exc).__name__}: {exc}"
                        )
                    done.append(Imported(ex.id, True, len(result.analysis_errors)))
                store.set_meta(db, "capture_epoch", str(top))
                store.commit(db)
            except BaseException:
                db.rollback()
                state.forget()
                raise
            yield from done
    finally:
        db.close()


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def analysis_differences(db: sqlite_utils.Database, expected: dict[str, dict]) -> list[dict]:
    """Where the stored analysis of imported calls differs from what the bundle carried."""
    out = []
    for call_id, analysis in expected.items():
        row = queries.get_call(db, call_id)
        if row is None:
            out.append({"call": call_id, "key": None, "expected": "the call", "got": None})
            continue
        for key in ANALYSIS_KEYS:
            if key in analysis and not _same(analysis[key], row.get(key)):
                out.append({"call": call_id, "key": key, "expected": analysis[key], "got": row.get(key)})
    return out
