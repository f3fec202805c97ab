"""Feeding the search index: the texts of each call, as the writer stores it or by ``reindex``.

``SearchIndexer`` is a writer analyzer that runs after the main analysis (so the call's session is
final). It splits the prompt into the canonical segments the analysis uses (reusing the previous
call's segments of the session, as the analysis does) and the response into its texts, and hands
them to ``store/search.py``, which records each distinct text once (docs/architecture.md, "The
search index"); ``search_text.py`` extracts the texts (and reads them back from the stored bodies).
``backfill`` rebuilds the index for calls already stored.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator

from ctxscope.inspector.analyses.incremental import Prepared, prepare
from ctxscope.inspector.pipeline.analysis_input import CallInput, from_row, from_writer
from ctxscope.inspector.pipeline.analyze import Analyzer, configured
from ctxscope.inspector.pipeline.findings_record import FindingsRecorder
from ctxscope.inspector.pipeline.replay_links import ReplayLinker
from ctxscope.inspector.pipeline.search_text import prompt_pieces, response_pieces
from ctxscope.inspector.pipeline.session_titles import TitleRecorder
from ctxscope.inspector.store.analysis_rows import call_ids, immediate
from ctxscope.inspector.store.db import Db, is_stored, record_event
from ctxscope.inspector.store.derived import search
from ctxscope.inspector.store.layout.known import KnownIds

log = logging.getLogger("ctxscope.search")

_SESSIONS_REMEMBERED = 64


class SearchIndexer:
    """Indexes each stored call's texts; one instance per writer (not thread-safe).

    The segments a call shares with the session's previous call (the leading messages it re-sends,
    which ``prepare`` reuses byte for byte) are in the index already, with that call: only the
    others are offered to the store. The previous call counts only while it is still stored (a
    rolled-back batch or a deleted session takes its occurrences with it) and is not this call
    (a batch written again after a failure).
    """

    def __init__(self, analysis: Analyzer | None = None) -> None:
        # session -> (call id, prompt, the writer's KnownIds generation when it was indexed); the prompt
        # is let go of by release(), the id is kept
        self._last: OrderedDict[str, tuple[str, Prepared | None, int | None]] = OrderedDict()
        self.analysis = analysis  # the analyzer that ran before on the same call, if any

    def __call__(self, db: Db, call: dict) -> None:
        known = call.get("_known")
        self.index(db, from_writer(db, call), known if isinstance(known, KnownIds) else None)

    def release(self) -> None:
        """Let go of the remembered prompts (an idle writer), keeping each session's last indexed
        call: a call the analysis bases on it still offers only its new pieces."""
        for session, (call_id, _prompt, generation) in self._last.items():
            self._last[session] = (call_id, None, generation)

    def index(self, db: Db, inp: CallInput, known: KnownIds | None = None) -> int:
        """Index one call; ``known``: the writer's ids (with them, a previous call indexed since
        nothing was rolled back or deleted is known to be stored without asking)."""
        shared = self.analysis.last if self.analysis is not None else None
        if shared is not None and shared.call_id != inp.id:
            shared = None
        # The analysis may have regrouped the call: its session is the one it wrote.
        session = shared.session if shared is not None else (search.call_session(db, inp.id) or inp.session)
        generation = known.generation if known is not None else None
        last = self._last.get(session)
        unchanged = generation is not None and last is not None and last[2] == generation
        if last is not None and (last[0] == inp.id or not (unchanged or is_stored(db, last[0]))):
            last = None
        if shared is not None:  # the analysis prepared this very body: reuse its work
            prepared = shared.prepared
            reused = last is not None and shared.base == last[0]  # what it reused is indexed already
        else:
            prepared, base = prepare(inp.api, inp.body, inp.raw, [last[1]] if last is not None and last[1] else [])
            reused = base is not None
        pieces = prompt_pieces(prepared, reused=reused)
        added = search.add_pieces(db, inp.id, session, pieces + response_pieces(inp.response), known)
        if prepared is not None and prepared.reusable:  # only once its pieces are in
            self._last[session] = (inp.id, prepared, generation)
            self._last.move_to_end(session)
            while len(self._last) > _SESSIONS_REMEMBERED:
                self._last.popitem(last=False)
        return added


# What the daemon's writer runs on every stored call, named so the writer's child process can import it.
WRITER_ANALYZERS = "ctxscope.inspector.pipeline.search_index:writer_analyzers"


def writer_analyzers(
    prices_path: str | None = None, provider_itself: str | None = None
) -> list[Analyzer | TitleRecorder | SearchIndexer | ReplayLinker | FindingsRecorder]:
    """The analysis, then the session's title, the search index (which reads the session the analysis
    settled on), the link from a replay to the call it re-sent, then the call's findings facts."""
    analysis = configured(prices_path, provider_itself)
    return [analysis, TitleRecorder(analysis), SearchIndexer(analysis), ReplayLinker(), FindingsRecorder(analysis)]


def backfill(db: Db, *, session: str | None = None, batch: int = 200) -> Iterator[str]:
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
