"""The analysis of every stored call: session, thread, relation, tokens, cache verdict, markers.

``Analyzer`` is a CaptureWriter analyzer: it runs in the writer thread, inside the transaction
that stores the call, just before the call's row is inserted, and its results are inserted with the
row (``row_columns``; docs/architecture.md, "One INSERT per call"), so every call is analysed once,
when it is stored. For the process lifetime it keeps a TokenCounter (counts
by segment hash) and the last calls of each recent thread per session and key (``RecentMemory``):
a new body reuses the canonical segments of the messages it shares byte for byte with one of them
(inspector/analyses/incremental.py) and only new segments are counted, so a call costs about its new
content. A session it has not seen since it started (after a daemon restart, or in ``reindex``) is
rebuilt from the store (pipeline/cold_start.py).

``session`` is the client's own id when it sends one (path label, session headers, Claude Code's
metadata.user_id, prompt_cache_key, a resolvable previous_response_id); without one the
conversation's lineage decides, per API key and client ("key:<fingerprint>:<first call>", see
docs/architecture.md, "Sessions and threads"); ``grouped_by`` says which rule placed the call.
``thread`` splits a session into chains of continuing prompts; a retry's place is pipeline/retries.py's.

Time: cache TTLs are judged on the calls' ``started_at``. ``clock_offset`` (seconds) is added to
the time of calls analysed live: tests shift it together with the simulator's clock to make an idle
gap happen without sleeping. ``reindex`` always uses the stored times.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.analyses.accounting import TokenBreakdown, TokenCounter
from ctxscope.inspector.analyses.cache.memory import CacheMemory, Learned, reported
from ctxscope.inspector.analyses.cache.prediction import Observed
from ctxscope.inspector.analyses.cache.provider_agreement import asked_body, provider_agreement
from ctxscope.inspector.analyses.cache.verdicts import judge_call, parse_provider_diagnostics
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.effects import place_effects
from ctxscope.inspector.analyses.incremental import Prepared, View, count, prepare
from ctxscope.inspector.analyses.markers import Marker, infer_markers
from ctxscope.inspector.analyses.prices import PriceTable, load_prices
from ctxscope.inspector.analyses.prompt_metadata import ProviderItself, cache_view, metadata_changes, note
from ctxscope.inspector.analyses.relation import CallContext, Relation, classify
from ctxscope.inspector.analyses.threads import explicit_session_id, place_call
from ctxscope.inspector.pipeline.analysis_columns import Analysis
from ctxscope.inspector.pipeline.analysis_input import CallInput, declared_markers, from_writer
from ctxscope.inspector.pipeline.chain_links import Producers, chained_body
from ctxscope.inspector.pipeline.cold_start import reload_scope
from ctxscope.inspector.pipeline.recent import RecentMemory, Remembered, Scope
from ctxscope.inspector.pipeline.retries import after_failure, numbered, with_retry
from ctxscope.inspector.pipeline.scopes import scope_of
from ctxscope.inspector.pipeline.session_titles import TitleRecorder
from ctxscope.inspector.store import analysis_rows as rows
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived import cache_minimums
from ctxscope.inspector.store.sessions import NON_MODEL_SESSION
from ctxscope.proxy.wire.apis import non_model_kind
from ctxscope.vocab.apis import Api
from ctxscope.vocab.kinds import EpochReason, RelationKind

log = logging.getLogger("ctxscope.analysis")

LLM_APIS = frozenset(
    {Api.ANTHROPIC_MESSAGES, Api.ANTHROPIC_COUNT_TOKENS, Api.OPENAI_CHAT, Api.OPENAI_RESPONSES, Api.GEMINI_GENERATE}
)
# Segment counts kept for reuse (~350 bytes each): a long session's distinct segments, not every
# segment a long-running daemon ever counted (docs/architecture.md, "Memory").
COUNTED_SEGMENTS = 16_384
# Calls whose columns are kept for a batch the writer stores again after a failure: at least a batch's.
REDO_KEPT = 512
# Shared leading items below this many bytes are canonicalised again: joining a new prompt to its
# base costs more than that (a small call re-sending only its system prompt).
MIN_REUSE = 1024


class Analyzer:
    """Analyses calls as they are stored; one instance per writer (it is not thread-safe)."""

    # In the writer it writes nothing but (rarely) a newly learned cache minimum: its columns go into
    # the call's INSERT. Called after the insert (``__call__``), its only write is the one UPDATE at
    # the end of apply(). Either way it needs no savepoint to undo a failure halfway; a learned
    # minimum that fails to be stored is logged, and if it is kept after a later failure it is still true.
    single_write = True

    def __init__(
        self,
        *,
        prices: PriceTable | None = None,
        counter: TokenCounter | None = None,
        memory: RecentMemory | None = None,
        clock_offset: float = 0.0,
        provider_itself: ProviderItself | None = None,
    ):
        self.provider_itself = provider_itself or ProviderItself()
        self.prices = prices if prices is not None else load_prices()
        self.counter = counter or TokenCounter(max_entries=COUNTED_SEGMENTS)
        self.memory = memory or RecentMemory()
        self.clock_offset = clock_offset
        self.cache_memory: CacheMemory | None = None  # learned minimums are loaded from the store on first use
        self.last: SharedPrompt | None = None  # what the last call written had prepared, for the search index
        self._prepared: tuple[str, Prepared | None, str | None] | None = None  # a SharedPrompt without its session
        # call id -> (its columns, the minimums it learned) for the writer's calls analysed last: a batch
        # rolled back and stored again takes them as they were, since this memory already holds the
        # calls (docs/architecture.md, "A savepoint only after a failure")
        self._analysed: OrderedDict[str, tuple[dict, list[Learned]]] = OrderedDict()
        self._learned: list[Learned] = []  # what the last _columns saved

    def __call__(self, db: Db, call: dict) -> None:
        self.apply(db, from_writer(db, call))

    def row_columns(self, db: Db, call: dict) -> dict:
        """The analysis of a call the writer is about to insert: its columns go into the INSERT
        (docs/architecture.md, "One INSERT per call"). A call stored again (``_redo``: its batch
        rolled back) gets the columns it got the first time, and its learned minimums saved again."""
        if call.get("_redo"):
            found = self._analysed.get(call["id"])
            if found is not None:
                self.last = None  # the search index prepares the prompt itself
                cols, learned = found
                if learned:
                    _save_learned(db, learned, call["id"])
                return dict(cols)
        cols = self._columns(db, from_writer(db, call), live=True)[1]
        self._analysed[call["id"]] = (cols, self._learned)
        self._analysed.move_to_end(call["id"])
        if len(self._analysed) > REDO_KEPT:
            self._analysed.popitem(last=False)
        return cols

    def trim(self, max_bytes: int) -> None:
        """A burst is over: keep at most ``max_bytes`` of recent calls (the least recent scopes go)."""
        self.memory.shrink(max_bytes)

    def release(self) -> None:
        """Forget recent calls, counts and learned minimums (an idle writer): a session that comes
        back is rebuilt from the store, as after a restart (docs/architecture.md, "Memory")."""
        self.memory.clear()
        self.counter.clear()
        self.cache_memory = None
        self.last = self._prepared = None
        self._analysed.clear()

    def apply(self, db: Db, inp: CallInput, *, live: bool = True) -> Analysis:
        """Analyse one stored call and write the result onto its row."""
        analysis, cols = self._columns(db, inp, live=live)
        rows.write_analysis(db, inp.id, cols)
        return analysis

    def _columns(self, db: Db, inp: CallInput, *, live: bool) -> tuple[Analysis, dict]:
        self.last = None
        analysis = self.analyze(db, inp, live=live)
        cols = analysis.columns()
        if self._prepared is not None and self._prepared[0] == inp.id:
            self.last = SharedPrompt(inp.id, analysis.session, *self._prepared[1:], tokens=analysis.tokens)
        self._learned = []
        if self.cache_memory is not None and self.cache_memory.unsaved:  # rare, and true even if left behind
            self._learned = list(self.cache_memory.unsaved)
            _save_minimums(db, self.cache_memory, inp.id)
        return analysis, cols

    def analyze(self, db: Db, inp: CallInput, *, live: bool = True) -> Analysis:
        """The analysis of one stored call (nothing written), remembering it for the next calls."""
        producers = Producers(db, inp.id)
        time = inp.started_at + (self.clock_offset if live else 0.0)
        explicit = explicit_session_id(inp.headers, inp.body, inp.session_label, producers.session)
        kind = non_model_kind(inp.method or "", inp.path or "") if inp.api not in LLM_APIS else None
        if kind is not None:  # no model call: kept out of the sessions (docs/architecture.md, "Non-model requests")
            explicit = (NON_MODEL_SESSION, "non_model:" + kind)
        fallback = ("key:" + inp.key_fingerprint[:12], "key") if inp.key_fingerprint else ("anon", "anon")
        # Calls without a session id share one pool per key and client, whatever their session.
        scope = scope_of(explicit, inp.client, inp.key_fingerprint)
        pool = self._pool(db, scope, inp.rowid, None if explicit else inp.client)
        prepared, base = None, None
        self._prepared = None
        prev_response = inp.body.get("previous_response_id") if isinstance(inp.body, dict) else None
        linked = producers.linked(prev_response if isinstance(prev_response, str) else None)
        body, raw = inp.body, inp.raw
        if inp.api == Api.OPENAI_RESPONSES and linked is not None:
            body, raw = chained_body(db, inp.body, inp.raw, pool, producers)
        if inp.api in LLM_APIS:
            prepared, used = prepare(
                inp.api,
                body,
                raw,
                [r.prepared for r in pool],
                min_reuse=MIN_REUSE,
                view=self._view(inp.upstream),
            )
            base = next((r for r in pool if r.prepared is used), None)
            self._prepared = (inp.id, prepared, base.call_id if base is not None else None)
        prompt = prepared.prompt if prepared is not None else None
        placement = place_call(inp.id, prompt, explicit, [r.recent for r in pool], linked, fallback=fallback, time=time)
        if explicit is None and placement.predecessor is None:
            placement = after_failure(db, inp, placement)
        session, source, seq, attempt, retry_of = numbered(db, inp, placement)
        prev = next((r for r in pool if r.call_id == placement.predecessor), None)
        relation = Relation(RelationKind.NOT_COMPARABLE, detail="not a recognised LLM call")
        if inp.api in LLM_APIS:
            first = EpochReason.THREAD_START if placement.thread_start else EpochReason.SESSION_START
            relation = self._relate(db, prev, inp, prompt, first, body)
        tokens = (
            count(self.counter, prepared, base.prepared if base else None, base.tokens if base else None)
            if prepared
            else None
        )

        prediction, cache = None, None
        if prompt is not None and tokens is not None and inp.ok and inp.api != Api.ANTHROPIC_COUNT_TOKENS:
            prev_seen = Observed(prev.prompt, prev.tokens, prev.time) if prev is not None else None
            if self.cache_memory is None:
                self.cache_memory = CacheMemory(Learned(*row) for row in cache_minimums.load(db))
            diagnostics = parse_provider_diagnostics(inp.api, asked_body(inp.body, inp.annotations), inp.response)
            got = reported(inp.usage)
            price = self.prices.quote(
                prompt.model, inp.started_at, prompt_tokens=got[0] if got else tokens.total, provider=inp.provider
            )
            prediction, cache = judge_call(
                prev_seen,
                Observed(prompt, tokens, time),
                relation,
                inp.usage,
                self.cache_memory,
                scope=inp.key_fingerprint or "",
                price=price,
                provider_diagnostics=diagnostics,
            )
            agreement = provider_agreement(
                diagnostics,
                relation.kind,
                relation.epoch_reason,
                cache.verdict,
                cache.break_pointer,
                cache.break_segment_kind,
                relation.pointer,
            )
            cache = dataclasses.replace(cache, provider_agreement=agreement)

        markers: list[Marker] = []
        if prompt is not None and tokens is not None:
            markers = infer_markers(
                prev.prompt if prev else None, prompt, relation, prev.tokens.total if prev else None, tokens.total
            )
        markers = place_effects(
            with_retry(markers, attempt, retry_of),
            declared_markers(inp.annotations),
            prev.prompt if prev else None,
            prompt,
            relation,
            inp.body,
        )

        if prepared is not None and tokens is not None and inp.ok:
            self.memory.add(
                scope,
                Remembered(
                    inp.id,
                    session,
                    placement.thread_id,
                    prepared,
                    tokens,
                    time,
                    inp.capture_epoch,
                    inp.provider,
                    inp.api,
                    body=body,
                ),
            )
        return Analysis(
            session,
            source,
            seq,
            placement if inp.api in LLM_APIS else None,
            relation,
            tokens,
            prediction,
            cache,
            tuple(markers),
            _response_id(inp.response),
            attempt,
            retry_of,
            placement.grouped_by,
        )

    def _relate(
        self,
        db: Db,
        prev: Remembered | None,
        inp: CallInput,
        prompt: CanonicalPrompt | None,
        first: EpochReason,
        body: Any,
    ) -> Relation:
        cur = CallContext(prompt, inp.provider, inp.api, inp.capture_epoch, body)
        if prev is None:
            return classify(None, cur, first)
        before = CallContext(prev.prompt, prev.provider, prev.api, prev.capture_epoch, None)
        rel = classify(before, cur)
        if rel.kind in (RelationKind.APPEND_ONLY, RelationKind.IDENTICAL) and prompt is not None:
            changed = note(metadata_changes(prev.prompt, prompt))
            if changed:  # a block the upstream leaves out of its cache key: said, but no break
                return dataclasses.replace(rel, detail=changed)
        k, n_prev = rel.shared_segments, len(prev.prompt.segments)
        if rel.pointer is not None and prompt is not None and k < n_prev and k < len(prompt.segments):
            # Only a difference inside a segment needs the predecessor's body, to refine the pointer.
            try:
                raw, body = prev.prepared.raw, prev.body  # a thread's latest keeps its parsed body
                if body is None:
                    body = json.loads(raw) if raw is not None else queries.get_request_json(db, prev.call_id)
            except Exception as e:  # a damaged body only costs pointer precision
                log.warning("could not load the body of %s: %s", prev.call_id, e)
                body = None
            if body is not None:
                rel = classify(CallContext(prev.prompt, prev.provider, prev.api, prev.capture_epoch, body), cur)
        return rel

    def _view(self, upstream: str | None) -> View:
        """The hashes ``upstream`` keys its cache on (docs/architecture.md, "Prefix relations")."""
        return functools.partial(cache_view, upstream=upstream, itself=self.provider_itself)

    def _pool(self, db: Db, scope: Scope, rowid: int, client: str | None) -> list[Remembered]:
        calls = self.memory.calls(scope)
        if calls is not None:
            return calls
        self.memory.open(scope)
        for rem in reload_scope(db, scope, rowid, client, self.counter, self._view):
            self.memory.add(scope, rem)
        return self.memory.calls(scope) or []


@dataclass(frozen=True)
class SharedPrompt:
    """A call's prompt as the analysis prepared it, and the remembered call it reused segments of:
    the search index takes it instead of canonicalising the same body again."""

    call_id: str
    session: str  # the session the analysis placed the call in
    prepared: Prepared | None
    base: str | None  # the call whose leading items it reused (None: none)
    tokens: TokenBreakdown | None = None  # its counts (the findings facts take them too)


def _save_minimums(db: Db, memory: CacheMemory, call_id: str) -> None:
    """Persist what the analysis learned of the providers' cache minimums; a failure costs only that."""
    _save_learned(db, memory.unsaved, call_id)
    memory.unsaved.clear()


def _save_learned(db: Db, learned: list[Learned], call_id: str) -> None:
    try:
        for one in learned:
            cache_minimums.save(db, one.family, one.model, one.tokens, one.at, call_id)
    except sqlite3.Error as e:
        log.warning("could not store a learned cache minimum: %s", e)


def _response_id(response: Any) -> str | None:
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) and rid else None


# What the daemon's writer runs on every stored call, named so the writer's child process can import it.
WRITER_ANALYZERS = "ctxscope.inspector.pipeline.analyze:writer_analyzers"


def writer_analyzers(
    prices_path: str | None = None, provider_itself: str | None = None
) -> list[Analyzer | TitleRecorder]:
    """The analyzers the capture writer runs on every stored call: the analysis, then the title of a
    session's first calls (from the prompt the analysis prepared)."""
    analysis = configured(prices_path, provider_itself)
    return [analysis, TitleRecorder(analysis)]


def configured(prices_path: str | None = None, provider_itself: str | None = None) -> Analyzer:
    """The analysis with the daemon's settings. A bad price file costs its
    overrides (said in the log), not the capture. ``provider_itself``: ``ProviderItself.to_text``
    of the daemon's config (which upstreams leave known metadata blocks out of their cache key)."""
    try:
        prices = load_prices(prices_path or None)
    except (ValueError, OSError) as exc:
        log.error("ignoring the price file: %s", exc)
        prices = load_prices()
    try:
        itself = ProviderItself.from_text(provider_itself)
    except ValueError as exc:
        log.error("ignoring the provider-itself settings: %s", exc)
        itself = ProviderItself()
    return Analyzer(prices=prices, provider_itself=itself)
