"""Taking each stored call's findings facts, in the writer (docs/architecture.md, "Findings").

``FindingsRecorder`` is a writer analyzer that runs after the main analysis, so the call's session
and thread are final; it takes the prompt and token counts the analysis made (``Analyzer.last``),
compares it with its thread's previous call and steps its session's cache replay, then stores the
call's ``CallFacts`` (one INSERT). It remembers the last call of recent threads and the replay of
recent sessions; one it has forgotten (or never seen, after a restart) comes back from the store:
the previous call's body, parsed once, and the replay restored from the session's stored facts.

``backfill`` takes the facts of a session stored before the writer took them (or whose facts no
longer match its threads, after a ``reindex``), from its bodies, once: the first time its
findings are read.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from ctxscope.inspector.advisor.call_facts import CallFacts, FactsTaker, skipped
from ctxscope.inspector.advisor.model import SessionCall
from ctxscope.inspector.advisor.session_replay import SessionReplay
from ctxscope.inspector.advisor.shape import SKIPPED, shape_json
from ctxscope.inspector.analyses.accounting import TokenBreakdown, TokenCounter
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.incremental import Prepared, count, prepare
from ctxscope.inspector.analyses.prices import PriceTable, load_prices
from ctxscope.inspector.base.clock import unix_time
from ctxscope.inspector.pipeline.analysis_input import CallInput, from_writer
from ctxscope.inspector.pipeline.analyze import COUNTED_SEGMENTS, Analyzer
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived import call_shapes, findings_facts
from ctxscope.inspector.store.session_calls import session_call_rows

log = logging.getLogger("ctxscope.analysis")

THREADS_KEPT = 64  # the last call of this many threads (their prompts mostly shared with the analysis')
SESSIONS_KEPT = 64  # cache replays kept
REDO_KEPT = 512  # facts kept for a batch stored again after a failure


class FindingsRecorder:
    """Stores each call's findings facts as the writer stores the call; one per writer (not thread-safe)."""

    single_write = True  # one INSERT: it needs no savepoint of its own

    def __init__(self, analysis: Analyzer | None = None, prices: PriceTable | None = None):
        self.analysis = analysis
        self.prices = prices if prices is not None else (analysis.prices if analysis is not None else load_prices())
        self.counter = analysis.counter if analysis is not None else TokenCounter(max_entries=4096)
        self.taker = FactsTaker()
        self._threads: OrderedDict[tuple[str, str], SessionCall] = OrderedDict()
        self._replays: OrderedDict[str, SessionReplay] = OrderedDict()
        self._done: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.last_shape = SKIPPED  # the prompt shape of the call ``take`` took last (advisor/shape.py)

    def __call__(self, db: Db, call: dict) -> None:
        if call.get("_redo") and call["id"] in self._done:  # its batch rolled back: the facts it had
            text, shape = self._done[call["id"]]
            findings_facts.save(db, call["id"], text)
            call_shapes.save(db, call["id"], shape)
            return
        self.last_shape = SKIPPED
        text = self.take(db, from_writer(db, call), call).to_json()
        findings_facts.save(db, call["id"], text)
        call_shapes.save(db, call["id"], self.last_shape)
        self._done[call["id"]] = (text, self.last_shape)
        if len(self._done) > REDO_KEPT:
            self._done.popitem(last=False)

    def release(self) -> None:
        """Forget recent threads and replays (an idle writer): they come back from the store."""
        self._threads.clear()
        self._replays.clear()
        self._done.clear()
        self.taker = FactsTaker()

    def take(self, db: Db, inp: CallInput, row: dict) -> CallFacts:
        session, thread = row["session"], row.get("thread") or inp.id
        current = self._session_call(inp, row)
        if current is None:
            return skipped(inp.id, session, row.get("thread"), inp.started_at)
        key = (session, thread)
        prev = self._threads.pop(key, None)
        if prev is None and row.get("thread"):
            prev = self._load_previous(db, session, thread, row.get("seq"))
        facts = self.taker.take(session, current, prev, self._replay(db, session, inp.id))
        self.last_shape = shape_json(current, prev)
        self._threads[key] = current
        while len(self._threads) > THREADS_KEPT:
            self._threads.popitem(last=False)
        return facts

    def _session_call(self, inp: CallInput, row: dict) -> SessionCall | None:
        shared = self.analysis.last if self.analysis is not None else None
        prompt: CanonicalPrompt | None
        tokens: TokenBreakdown | None
        if shared is not None and shared.call_id == inp.id and shared.prepared is not None and shared.tokens:
            prompt, tokens = shared.prepared.prompt, shared.tokens
        else:
            prompt = canonicalize(inp.api, inp.body)
            tokens = self.counter.count_prompt(prompt) if prompt is not None else None
        if prompt is None or tokens is None or not readable(inp.api, inp.body):
            return None
        return SessionCall(
            id=inp.id,
            seq=row.get("seq") or 0,
            started_at=inp.started_at,
            api=inp.api or "",
            model=prompt.model or row.get("model"),
            thread=row.get("thread"),
            scope=inp.key_fingerprint or "",
            usage=inp.usage,
            response=inp.response,
            prompt=prompt,
            tokens=tokens,
            compacted=bool(row.get("has_compaction_before")),
        )

    def _load_previous(self, db: Db, session: str, thread: str, seq: int | None) -> SessionCall | None:
        """The thread's previous call from the store (a thread this writer has not seen lately)."""
        found = findings_facts.previous_in_thread(db, session, thread, seq if seq is not None else 2**62)
        if found is None:
            return None
        facts = CallFacts.from_json(found[1])
        try:
            body = queries.get_request_json(db, found[0])
            row = queries.get_call(db, found[0]) or {}
        except Exception as e:  # a damaged body costs the comparison with it
            log.warning("could not reload call %s for its findings: %s", found[0], e)
            return None
        prompt = canonicalize(row.get("api"), body)
        if prompt is None or facts is None:
            return None
        return SessionCall(
            id=found[0],
            seq=row.get("seq") or 0,
            started_at=unix_time(row.get("started_at")),
            api=row.get("api") or "",
            model=facts.model,
            thread=thread,
            scope=row.get("key_fingerprint") or "",
            usage=None,
            response=None,
            prompt=prompt,
            tokens=self.counter.count_prompt(prompt),
        )

    def _replay(self, db: Db, session: str, call_id: str) -> SessionReplay:
        replay = self._replays.pop(session, None)
        if replay is None:
            replay = SessionReplay(self.prices)
            replay.restore(_stored(findings_facts.session_rows(db, session), but=call_id))
        self._replays[session] = replay
        while len(self._replays) > SESSIONS_KEPT:
            self._replays.popitem(last=False)
        return replay


def readable(api: str | None, body: Any) -> bool:
    """A prompt the findings read (as ``model.build_session`` decides): an API, and messages if any."""
    return api is not None and not (isinstance(body, dict) and body.get("messages") == [])


def _stored(rows: list[findings_facts.FactsRow], *, but: str) -> list[tuple[CallFacts, str]]:
    out = []
    for row in rows:
        if row.call_id == but or row.facts is None:
            continue
        facts = CallFacts.from_json(row.facts)
        if facts is not None:
            out.append((facts, row.key_fingerprint or ""))
    return out


def backfill(db: Db, session: str, prices: PriceTable, shapes_out: dict[str, str] | None = None) -> list[CallFacts]:
    """The facts of every call of ``session`` (an exact id), taken from its bodies and stored for
    the next reads. One call at a time, each parsed against its thread's previous body (as the
    writer parses it), so memory holds the last prompt of each thread, never the whole session.
    A store that cannot be written (read-only, or busy past the timeout) costs only the storing;
    ``shapes_out`` gets the prompt shapes taken, stored or not."""
    counter = TokenCounter(max_entries=COUNTED_SEGMENTS)
    taker, replay = FactsTaker(), SessionReplay(prices)
    last: dict[str, tuple[SessionCall, Prepared]] = {}
    out: list[CallFacts] = []
    shapes: list[tuple[str, str]] = []  # the prompt shapes too (advisor/shape.py): advise reads them
    for row in session_call_rows(db, session):
        row["started_at"] = unix_time(row["started_at"])
        thread = row["thread"] or row["id"]
        prev = last.get(thread)
        found = _parse(db, row, prev[1] if prev is not None else None, prev[0].tokens if prev else None, counter)
        if found is None:
            out.append(skipped(row["id"], session, row["thread"], row["started_at"]))
            shapes.append((row["id"], SKIPPED))
            continue
        call, prepared = found
        out.append(taker.take(session, call, prev[0] if prev is not None else None, replay))
        shapes.append((row["id"], shape_json(call, prev[0] if prev is not None else None)))
        last[thread] = (call, prepared)
    if shapes_out is not None:
        shapes_out.update(shapes)
    try:
        with db.conn:
            findings_facts.replace_session(db, [(f.id, f.to_json()) for f in out])
            call_shapes.replace_session(db, shapes)
    except Exception as e:
        log.warning("could not store the findings facts of session %s: %s", session, e)
    return out


def _parse(
    db: Db, row: dict, base: Prepared | None, base_tokens: TokenBreakdown | None, counter: TokenCounter
) -> tuple[SessionCall, Prepared] | None:
    """A stored call as the findings read it, its body parsed reusing ``base`` where it repeats it."""
    try:
        raw = queries.get_request_body(db, row["id"])
        body = json.loads(raw) if raw else None
        response = queries.get_final_response(db, row["id"])
    except Exception:  # an undecodable body is analysed no further, as model.build_session does
        return None
    if not readable(row["api"], body):
        return None
    prepared, used = prepare(row["api"], body, raw, [base] if base is not None else [])
    if prepared is None:
        return None
    tokens = count(counter, prepared, used, base_tokens if used is not None else None)
    usage = {k: row["usage_" + k] for k in ("input", "output", "cache_read", "cache_write")}
    call = SessionCall(
        id=row["id"],
        seq=row["seq"],
        started_at=row["started_at"],
        api=row["api"],
        model=prepared.prompt.model or row["model"],
        thread=row["thread"],
        scope=row["key_fingerprint"] or "",
        usage=usage if any(v is not None for v in usage.values()) else None,
        response=response,
        prompt=prepared.prompt,
        tokens=tokens,
        compacted=bool(row["has_compaction_before"]),
    )
    return call, prepared
