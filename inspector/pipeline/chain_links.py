"""The store's side of a ``previous_response_id`` chain: who produced a response, and the full body.

``response_chain.full_body`` rebuilds the prompt a Responses call continues from callbacks; this
module answers them from the analyzer's memory and the store (docs/architecture.md, "Prefix
relations"), looking each response id up once per call.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ctxscope.inspector.analyses.threads import RecentCall
from ctxscope.inspector.pipeline.recent import Remembered
from ctxscope.inspector.pipeline.response_chain import full_body
from ctxscope.inspector.store import analysis_rows as rows
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db

log = logging.getLogger("ctxscope.analysis")


class Producers:
    """Captured calls by the response id they produced (for ``previous_response_id``), looked up once."""

    def __init__(self, db: Db, call_id: str):
        self.db, self.call_id = db, call_id
        self._found: dict[str, tuple | None] = {}

    def get(self, response_id: str) -> tuple | None:
        if response_id not in self._found:
            self._found[response_id] = rows.producer_of(self.db, response_id, self.call_id)
        return self._found[response_id]

    def session(self, response_id: str) -> str | None:
        found = self.get(response_id)
        return found[1] if found else None

    def linked(self, previous_response_id: str | None) -> RecentCall | None:
        """The call whose response a body's ``previous_response_id`` names, if we captured it."""
        found = self.get(previous_response_id) if previous_response_id else None
        return RecentCall(found[0], None, found[1], found[2] or found[0]) if found else None


def chained_body(
    db: Db, body: Any, raw: bytes | None, pool: list[Remembered], producers: Producers
) -> tuple[Any, bytes | None]:
    """A ``previous_response_id`` call's body with the chain it continues spelled out, and its bytes
    (always written alike, so the next link's bytes share this one's); as sent when it cannot be."""

    def producer(response_id: str) -> str | None:
        found = producers.get(response_id)
        return found[0] if found else None

    def remembered(call_id: str) -> Any:
        return next((r.body for r in pool if r.call_id == call_id), None)

    def stored(call_id: str) -> tuple[Any, Any]:
        try:
            return queries.get_request_json(db, call_id), queries.get_final_response(db, call_id)
        except Exception as e:  # a damaged link costs the chain's comparison, as before
            log.warning("could not read call %s of a response chain: %s", call_id, e)
            return None, None

    full = full_body(body, producer, remembered, stored)
    if full is None:
        return body, raw
    return full, json.dumps(full, separators=(",", ":"), ensure_ascii=False).encode()
