"""A scope the analyzer has not seen since it started, rebuilt from the store.

After a daemon restart, an idle writer's release, or in ``reindex``, the analyzer holds no recent
calls of a session: it reloads the latest successful stored call of each of the scope's recent
threads (at most ``COLD_START_THREADS``, among its last ``COLD_START_CALLS``) and prepares and
counts them again (docs/architecture.md, "Memory").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.incremental import View, prepare_full
from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.pipeline.chain_links import Producers, chained_body
from ctxscope.inspector.pipeline.recent import Remembered, Scope
from ctxscope.inspector.pipeline.scopes import UNNAMED, UNNAMED_GROUPS
from ctxscope.inspector.store import analysis_rows as rows
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.vocab.apis import Api

log = logging.getLogger("ctxscope.analysis")

COLD_START_CALLS = 64  # stored calls of a session looked at to rebuild it ...
COLD_START_THREADS = 8  # ... and at most this many threads' latest calls reloaded


def reload_scope(
    db: Db,
    scope: Scope,
    rowid: int,
    client: str | None,
    counter: TokenCounter,
    view_of: Callable[[str | None], View],
) -> list[Remembered]:
    """The latest successful stored call of each recent thread of the scope, oldest first."""
    latest: dict[str, tuple] = {}
    if scope[0].startswith(UNNAMED):
        found = rows.latest_unnamed_calls(db, scope[1], client, UNNAMED_GROUPS, rowid, COLD_START_CALLS)
    else:
        found = rows.latest_thread_calls(db, scope[0], scope[1], rowid, COLD_START_CALLS)
    for row in found:
        if row[1] not in latest and len(latest) < COLD_START_THREADS:
            latest[row[1]] = row
    out = []
    for call_id, thread, started_at, epoch, provider, api, session, upstream in reversed(list(latest.values())):
        try:
            raw = queries.get_request_body(db, call_id)
            body = json.loads(raw) if raw else None
            if api == Api.OPENAI_RESPONSES and isinstance(body, dict) and body.get("previous_response_id"):
                body, raw = chained_body(db, body, raw, [], Producers(db, call_id))
            prepared = prepare_full(api, body, raw, view_of(upstream)) if raw else None
        except Exception as e:
            log.warning("could not reload call %s for analysis: %s", call_id, e)
            continue
        if prepared is not None:
            tokens = counter.count_prompt(prepared.prompt)
            out.append(
                Remembered(call_id, session, thread, prepared, tokens, unix_time(started_at), epoch or 0, provider, api)
            )
    return out
