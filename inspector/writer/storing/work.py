"""What the writer thread does with one queued item, inside its open transaction.

An exchange is stored without a savepoint of its own (``store_one``): a savepoint journals every
page the call changes, which cost more than anything else of a small call. A failure that leaves
the transaction usable raises ``CallFailed``: the writer rolls the batch back and stores it again,
each call in a savepoint (``isolated``), so the failing one is rolled back alone, counted and
recorded, and the others are stored (docs/architecture.md, "A savepoint only after a failure"). A
failure of the store itself is raised so the whole batch is retried. A session deletion
(``Deletion``) is served between two batches and answers its waiting caller (``serve_deletion``).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.ingest import Analyzer, IngestState, ingest
from ctxscope.inspector.writer.protocol import WriterUnavailable
from ctxscope.inspector.writer.storing.failures import call_event, describe, store_unavailable
from ctxscope.proxy.exchange import Exchange

log = logging.getLogger("ctxscope.store")


@dataclass(frozen=True)
class Deletion:
    """A session to delete, served by the writer thread between two batches."""

    session: str
    done: Future = field(default_factory=Future)


def serve_deletion(db: Db, request: Deletion, state: IngestState | None = None) -> bool:
    """Serve a deletion; False when the store failed (the caller reconnects). ``state`` forgets the
    ids it knew: the deletion may have removed their rows."""
    if not request.done.set_running_or_notify_cancel():
        return True  # its caller gave up waiting
    if state is not None:
        state.forget()
    try:
        request.done.set_result(delete_session(db, request.session))
    except Exception as e:
        request.done.set_exception(WriterUnavailable(f"deleting session {request.session!r} failed: {describe(e)}"))
        return not store_unavailable(e)
    return True


class CallFailed(Exception):
    """A call failed outside a savepoint of its own: its batch must be rolled back and stored again."""

    def __init__(self, call_id: str):
        super().__init__(call_id)
        self.call_id = call_id


def store_one(
    db: Db,
    state: IngestState,
    ex: Exchange,
    analyzers: Sequence[Analyzer],
    outcome: collections.Counter,
    events: list,
    *,
    isolated: bool = True,
) -> None:
    """One exchange; ``isolated``: in a savepoint, so a failure rolls back only this exchange (tallied
    in ``outcome``, its store event appended to ``events``). Not isolated, a failure that leaves the
    transaction usable raises ``CallFailed`` (the caller rolls back and stores the batch again)."""
    if store.is_stored(db, ex.id):
        outcome["already_stored"] += 1  # a recovered spool held a call a killed writer had committed
        return
    mark = len(state.ids.terms)
    try:
        if isolated:
            with store.Savepoint(db):
                result = ingest(db, ex, state, analyzers)
        else:
            result = ingest(db, ex, state, analyzers, isolated=False)
    except Exception as e:
        if not db.conn.in_transaction or store_unavailable(e):
            raise  # the store failed, or the error ended the whole transaction: redo the batch
        if not isolated:
            raise CallFailed(ex.id) from e  # what it wrote cannot be undone alone: redo the batch, isolated
        state.ids.drop_terms(mark)  # the search segments they were for are rolled back
        state.forget()  # its savepoint rolled back: the ids it stored are gone
        outcome["failed"] += 1
        events.append(call_event("write_failed", ex, describe(e)))
        log.error("capture of call %s failed: %s", ex.id, describe(e))
        return
    outcome["written"] += 1
    if result.row.get("parse_error"):
        outcome["parse_failed"] += 1
        events.append(call_event("parse_failed", ex, result.row["parse_error"]))
        log.warning("response of call %s could not be parsed: %s", ex.id, result.row["parse_error"])
    for name, err in result.analysis_errors:
        outcome["analysis_failed"] += 1
        events.append(call_event("analysis_failed", ex, f"{name}: {describe(err)}"))
        log.warning("analyzer %s failed on call %s: %s", name, ex.id, describe(err))
