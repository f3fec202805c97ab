"""Loading exported calls into a capture database through the writer's ingest, analysed like live ones.

The whole file is read and checked before anything is written, so a malformed file changes
nothing, one call at a time (``share/import_records.py``). Calls are stored in capture order; their
capture epochs keep their distances (a call that followed a daemon restart still does), shifted
past the database's own. A call whose id the database already holds is skipped: importing the same
file twice stores it once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import sqlite_utils

from ctxscope.inspector.share.exchanges import ANALYSIS_KEYS
from ctxscope.inspector.share.import_records import Loaded, Planned, Records
from ctxscope.inspector.share.imported import is_marked, mark_imported
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.ingest import Analyzer, IngestState, ingest
from ctxscope.proxy.exchange import Exchange

BATCH_BYTES = 16 << 20  # a transaction's bodies, at most (past one call): what the import holds at once


@dataclass(frozen=True)
class Imported:
    call_id: str
    stored: bool  # False: the database already held it
    analysis_errors: int
    checked: bool = False  # the file carried an analysis for it
    differences: tuple[dict, ...] = ()  # where the new analysis differs from the one the file carried


def import_calls(
    db_path: Path, calls: Sequence[tuple[Exchange, int | None]], analyzers: Sequence[Analyzer], *, batch: int = 100
) -> Iterator[Imported]:
    """Store and analyse ``calls`` ((exchange, capture epoch or None)), yielding each as it is done."""
    # Every imported call carries the mark (the readers set it; a caller that did not gets it here).
    ordered = sorted(
        ((ex if is_marked(ex) else mark_imported(ex, "file"), epoch) for ex, epoch in calls),
        key=lambda c: (c[0].started_at, c[0].id),
    )
    epochs = {e for _, e in ordered if e is not None}
    yield from _store(db_path, (Loaded(ex, epoch, None) for ex, epoch in ordered), epochs, analyzers, batch)


def import_records(
    db_path: Path, records: Records, planned: Sequence[Planned], analyzers: Sequence[Analyzer], *, batch: int = 100
) -> Iterator[Imported]:
    """Store and analyse the calls ``records.scan()`` checked (``planned``), each read again in capture order."""
    ordered = sorted(planned, key=lambda p: (p.started_at, p.call_id))
    epochs = {p.epoch for p in planned if p.epoch is not None}
    yield from _store(db_path, (records.load(p) for p in ordered), epochs, analyzers, batch)


def _batches(calls: Iterable[Loaded], most: int, max_bytes: int = BATCH_BYTES) -> Iterator[list[Loaded]]:
    """``calls`` in lists of up to ``most``, fewer when their bodies pass ``max_bytes``: one
    transaction each, and what the import holds at once."""
    chunk: list[Loaded] = []
    held = 0
    for call in calls:
        chunk.append(call)
        held += len(call.exchange.request_body) + len(call.exchange.response_body)
        if len(chunk) >= most or held >= max_bytes:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


def _store(
    db_path: Path, calls: Iterable[Loaded], epochs: set[int], analyzers: Sequence[Analyzer], batch: int
) -> Iterator[Imported]:
    db = store.connect(db_path)
    try:
        base = store.next_capture_epoch(db)
        offset = {e: i for i, e in enumerate(sorted(epochs))}
        top = base
        state = IngestState(base)
        for chunk in _batches(calls, batch):
            done: list[Imported] = []
            store.begin(db)
            state.ids.check(db)
            try:
                for call in chunk:
                    ex = call.exchange
                    if store.is_stored(db, ex.id):
                        done.append(Imported(ex.id, False, 0))
                        continue
                    state.capture_epoch = base + (offset[call.epoch] if call.epoch is not None else 0)
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
            for call, item in zip(chunk, done, strict=True):
                expected = {item.call_id: call.analysis} if call.analysis is not None else {}
                yield replace(item, checked=bool(expected), differences=tuple(analysis_differences(db, expected)))
            del chunk, done  # (a batch's bodies go before the next is read)
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
