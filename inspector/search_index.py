"""Feeding the search index: the texts of each call, as the writer stores it or by ``reindex``.

``SearchIndexer`` is a writer analyzer that runs after the main analysis (so the call's session is
final). It splits the prompt into the canonical segments the analysis uses (reusing the previous
call's segments of the session, as the analysis does) and the response into its texts, and hands
them to ``store/search.py``, which keeps each distinct text once (docs/architecture.md, "The
search index"). ``backfill`` rebuilds the index for calls already stored.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import sqlite_utils

from ctxscope.inspector.analyses.canonical_prompt import canonical_json
from ctxscope.inspector.analyses.incremental import Prepared, prepare
from ctxscope.inspector.analysis_input import CallInput, from_row, from_writer
from ctxscope.inspector.analyze import Analyzer
from ctxscope.inspector.analyze import writer_analyzers as analysis_analyzers
from ctxscope.inspector.share.replay import ReplayLinker
from ctxscope.inspector.store.analysis_rows import call_ids, immediate
from ctxscope.inspector.store.db import is_stored, record_event
from ctxscope.inspector.store.derived import search
from ctxscope.inspector.store.derived.search import Piece
from ctxscope.vocab.kinds import SearchArea

log = logging.getLogger("ctxscope.search")

AREA_OF_KIND = {
    "system": SearchArea.SYSTEM, "tools": SearchArea.TOOLS, "tool_result": SearchArea.TOOL_RESULTS,
    "user_text": SearchArea.MESSAGES, "assistant_text": SearchArea.MESSAGES, "tool_call": SearchArea.MESSAGES,
    "reminder": SearchArea.MESSAGES, "thinking": SearchArea.MESSAGES, "other": SearchArea.MESSAGES,
    "image": SearchArea.MESSAGES,
}  # fmt: skip
_RESPONSE_TEXT_KEYS = frozenset({"text", "content", "thinking", "refusal", "arguments", "output"})
_RESPONSE_JSON_KEYS = frozenset({"input"})  # a tool call's arguments as an object
_SESSIONS_REMEMBERED = 64


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def response_pieces(response: Any) -> list[Piece]:
    """The texts of a final response object, each with its JSON Pointer into that object."""
    out: list[Piece] = []

    def add(pointer: str, text: str) -> None:
        if text.strip():
            digest = hashlib.sha256(("responses\0" + text).encode()).hexdigest()
            out.append(Piece(digest, SearchArea.RESPONSES, "response", pointer, text))

    def walk(value: Any, pointer: str, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                here = f"{pointer}/{_escape(str(key))}"
                if isinstance(item, str) and key in _RESPONSE_TEXT_KEYS:
                    add(here, item)
                elif isinstance(item, dict) and key in _RESPONSE_JSON_KEYS:
                    add(here, canonical_json(item))
                else:
                    walk(item, here, depth + 1)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{pointer}/{i}", depth + 1)

    walk(response, "", 0)
    return out


def prompt_pieces(prepared: Prepared | None, *, reused: bool = False) -> list[Piece]:
    """The prompt's canonical segments that hold text (an image alone has none to search); with
    ``reused``, only those outside the leading items ``prepare`` took from the previous call."""
    if prepared is None:
        return []
    segments = list(prepared.prompt.segments)
    if reused and prepared.reused_items and prepared.starts:
        first_new = prepared.head + prepared.starts[prepared.reused_items]
        segments = segments[: prepared.head] + segments[first_new:]
    return [
        Piece(seg.hash, AREA_OF_KIND.get(seg.kind, SearchArea.MESSAGES), "request", seg.pointer, seg.text)
        for seg in segments
        if seg.text.strip()
    ]


class SearchIndexer:
    """Indexes each stored call's texts; one instance per writer (not thread-safe).

    The segments a call shares with the session's previous call (the leading messages it re-sends,
    which ``prepare`` reuses byte for byte) are in the index already, with that call: only the
    others are offered to the store. The previous call counts only while it is still stored (a
    rolled-back batch or a deleted session takes its occurrences with it) and is not this call
    (a batch written again after a failure).
    """

    def __init__(self, analysis: Analyzer | None = None) -> None:
        self._last: OrderedDict[str, tuple[str, Prepared]] = OrderedDict()  # session -> (call id, prompt)
        self.analysis = analysis  # the analyzer that ran before on the same call, if any

    def __call__(self, db: sqlite_utils.Database, call: dict) -> None:
        self.index(db, from_writer(db, call))

    def index(self, db: sqlite_utils.Database, inp: CallInput) -> int:
        shared = self.analysis.last if self.analysis is not None else None
        if shared is not None and shared.call_id != inp.id:
            shared = None
        # The analysis may have regrouped the call: its session is the one it wrote.
        session = shared.session if shared is not None else (search.call_session(db, inp.id) or inp.session)
        last = self._last.get(session)
        if last is not None and (last[0] == inp.id or not is_stored(db, last[0])):
            last = None
        if shared is not None:  # the analysis prepared this very body: reuse its work
            prepared = shared.prepared
            reused = last is not None and shared.base == last[0]  # what it reused is indexed already
        else:
            prepared, base = prepare(inp.api, inp.body, inp.raw, [last[1]] if last is not None else [])
            reused = base is not None
        pieces = prompt_pieces(prepared, reused=reused)
        added = search.add_pieces(db, inp.id, session, pieces + response_pieces(inp.response))
        if prepared is not None and prepared.reusable:  # only once its pieces are in
            self._last[session] = (inp.id, prepared)
            self._last.move_to_end(session)
            while len(self._last) > _SESSIONS_REMEMBERED:
                self._last.popitem(last=False)
        return added


# What the daemon's writer runs on every stored call, named so the writer's child process can import it.
WRITER_ANALYZERS = "ctxscope.inspector.search_index:writer_analyzers"


def writer_analyzers(prices_path: str | None = None) -> list[Analyzer | SearchIndexer | ReplayLinker]:
    """The analysis, then the search index (which reads the session the analysis settled on), then
    the link from a replay to the call it re-sent."""
    analysis = analysis_analyzers(prices_path)
    return [*analysis, SearchIndexer(analysis[0]), ReplayLinker()]


def backfill(db: sqlite_utils.Database, *, session: str | None = None, batch: int = 200) -> Iterator[str]:
    """Rebuild the index of stored calls (of one session) in capture order, yielding each call id.

    A call that fails is logged and recorded as ``analysis_failed``; the others go on.
    """
    indexer = SearchIndexer()
    ids = call_ids(db, session)
    with immediate(db):
        search.clear(db, session)
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        with immediate(db):
            for call_id in chunk:
                try:
                    with db.atomic():
                        indexer.index(db, from_row(db, call_id))
                except Exception as e:
                    log.warning("search indexing of call %s failed: %s", call_id, e)
                    record_event(db, "analysis_failed", call_id=call_id, detail=f"search: {type(e).__name__}: {e}")
        yield from chunk
