"""A retry's place: the failed call it repeats decides its session, thread and attempt number.

The store links a repeat of a failed call within its API key as it ingests it; the analysis may put
the call in another session, so the link is made again there (``numbered``). A call without a
session id that repeats a failed call joins that call's session and thread (``after_failure``):
the failed call is not remembered as a predecessor, so its lineage cannot find it.
"""

from __future__ import annotations

import dataclasses

from ctxscope.inspector.analyses.markers import Marker
from ctxscope.inspector.analyses.threads import Placement
from ctxscope.inspector.base.clock import iso
from ctxscope.inspector.pipeline.analysis_input import CallInput
from ctxscope.inspector.pipeline.scopes import UNNAMED_GROUPS
from ctxscope.inspector.store import analysis_rows as rows
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.ingest import RETRY_WINDOW_S, is_failure
from ctxscope.vocab.kinds import GroupedBy, MarkerKind


def numbered(db: Db, inp: CallInput, placement: Placement) -> tuple[str, str, int | None, int, str | None]:
    """(session, its source, seq, attempt, retry_of): the placement's session, numbered in it (seq
    None for a call not inserted yet: the writer numbers it as it inserts it)."""
    session, source = placement.session_id, placement.session_source
    if inp.seq is None:
        return (session, source, None, *_relink_retry(db, inp, session))
    if session == inp.session:
        return session, source, inp.seq, inp.attempt, inp.retry_of
    seq = rows.next_seq(db, session)
    return (session, source, seq, *_relink_retry(db, inp, session))


def after_failure(db: Db, inp: CallInput, placement: Placement) -> Placement:
    """A call without a session id that repeats a failed call's body (a retry) joins its session and
    thread: the failed call is not remembered as a predecessor, so lineage cannot find it."""
    if not inp.request_sha256 or inp.no_failed_twin:
        return placement
    found = rows.latest_unnamed_request(
        db,
        inp.key_fingerprint,
        inp.client,
        UNNAMED_GROUPS,
        inp.request_sha256,
        inp.id,
        iso(inp.started_at - RETRY_WINDOW_S),
        iso(inp.started_at),
    )
    if found is None or not is_failure(found[1], found[2], found[3]):
        return placement
    return dataclasses.replace(
        placement,
        session_id=found[4],
        thread_id=found[5] or inp.id,
        parent_thread_id=None,
        grouped_by=GroupedBy.LINEAGE,
        thread_start=False,
    )


def with_retry(markers: list[Marker], attempt: int, retry_of: str | None) -> list[Marker]:
    """The store's retry linkage (a repeat of a failed call) as a retry marker."""
    if not retry_of:
        return markers
    out = []
    found = False
    for m in markers:
        if m.kind == MarkerKind.RETRY and not found:
            m, found = Marker(MarkerKind.RETRY, m.pointer, {**m.detail, "attempt": attempt, "retry_of": retry_of}), True
        out.append(m)
    return out if found else out + [Marker(MarkerKind.RETRY, None, {"attempt": attempt, "retry_of": retry_of})]


def _relink_retry(db: Db, inp: CallInput, session: str) -> tuple[int, str | None]:
    """attempt/retry_of within the call's own session (the store linked it within its key's)."""
    if not inp.request_sha256 or inp.no_failed_twin:
        return 1, None
    prev = rows.latest_same_request(
        db,
        session,
        inp.request_sha256,
        inp.method,
        inp.path,
        inp.id,
        iso(inp.started_at - RETRY_WINDOW_S),
        iso(inp.started_at),
    )
    if prev is not None and is_failure(prev[2], prev[3], prev[4]):
        return (prev[1] or 1) + 1, prev[0]
    return 1, None
