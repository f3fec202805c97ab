"""Source provenance: tool results carry their sources, and answers cite them.

An ordinary extension, on by default (``source-provenance``; ``session.set_enabled(id, False)``
turns it off for one session). Two halves:

- ``after_tool_call``: the adapters (``provenance_adapters``) turn a successful read, grep, fetch
  or MCP-style call into source references with session-stable ids, stored in the result's
  ``details["source_references"]`` (a tool cannot supply that key itself); web and MCP results get
  a host marker block appended for the model (``provenance_marker``), and lookalike markers in a
  tool's own output are renamed. Each source's text is indexed for the quote test.
- ``after_llm_call`` on a final answer (no tool calls): citations are rewritten to one form
  (``provenance_cite``). If the answer evidently uses a source (``provenance_quotes``: a verbatim
  run of 12 words / 60 characters) and cites no source at all, it is rejected once per turn with
  reason ``missing_source_citation`` and asked again; otherwise only its text is rewritten.

``@path`` mentions in the user's input resolve to file sources the same way (origin ``user``).
The inspector sees it all as declared markers: ``sources_available`` (count, new, kinds) on the
request after sources arrive, ``citations`` (count, missing, unknown) for each final answer, on
the next request (the turn's own effects end with the turn), and ``source_citation_retry`` on the
retry request. Every handler is cheap by construction and bounded; ``bench/provenance.py``
measures the time it adds per step.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from ctxscope.vocab.effects import Effect
from ctxscope.vocab.kinds import MarkerKind

from ..core.events import (
    Event,
    LlmCallContext,
    LlmCallResult,
    Retry,
    RewriteResult,
    RewriteText,
    ToolResultContext,
    TurnStart,
)
from ..core.messages import ToolCall, ToolResult
from ..core.spi import Extension, ExtensionAPI
from .adapters import Found, adapt, user_sources
from .cite import normalise
from .marker import DETAILS_KEY, HOST_MARKERS, MarkerRegistry, defang, strip_trailing_markers
from .quotes import QuoteHit, QuoteIndex
from .refs import FILE, SourceCatalog, SourceReference, clean_title, sha256_text

log = logging.getLogger("ctxscope.agent.provenance.extension")

EXTENSION_ID = "source-provenance"
MISSING_SOURCE_CITATION = "missing_source_citation"
REFS_KEY = "source_references"
STATE_KEY = "source_provenance"  # session state: the user's @path sources
THREAD_INDEX_CHARS = 64 * 1024  # index larger texts off the event loop
MAX_USER_SOURCES = 100
MAX_SESSIONS = 32  # sessions whose sources are held in memory; an evicted one is read back from its history

SYSTEM_PROMPT = (
    "Sources: file reads and searches, fetched pages and MCP results are sources. When your final answer "
    "relies on one, cite it right where you use it: a file as [path:first-last] (for example "
    "[src/app.py:10-24]), a result that ends with a ctxscope-source block by its id (for example [S3]). "
    "Blocks named not-a-ctxscope-source are part of a tool's own output, not sources."
)


def follow_up(hits: list[QuoteHit], catalog: SourceCatalog) -> str:
    """Our retry wording: which sources the answer repeats, and how to cite each."""
    named = []
    for hit in hits[:3]:
        ref = catalog.get(hit.source_id)
        if ref is None:
            continue
        cite = f"[{clean_title(ref.locator, 200)}]" if ref.kind == FILE else f"[{ref.id}]"
        named.append(f"{clean_title(ref.locator, 200)} (cite as {cite})")
    return (
        "Your answer repeats text word for word from " + "; ".join(named) + ", but it does not say where that "
        "text came from. Give the same answer again and cite each source right where you use it: "
        "[S<n>] for a result with a ctxscope-source block, [path:first-last] for a file."
    )


@dataclass
class _Session:
    catalog: SourceCatalog = field(default_factory=SourceCatalog)
    quotes: QuoteIndex = field(default_factory=QuoteIndex)
    restored: bool = False
    announced: int = 0  # catalog size last declared
    pending: list[Effect] = field(default_factory=list)  # effects for the next request (a final answer's citations)
    turn: int = 0
    user_text: str = ""
    mentions: str = ""  # input whose @paths still need resolving
    retried_turn: int = 0


class SourceProvenance:
    def __init__(self, *, markers: MarkerRegistry = HOST_MARKERS) -> None:
        self.markers = markers
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def session(self, session_id: str) -> _Session:
        st = self._sessions.get(session_id)
        if st is None:
            st = self._sessions[session_id] = _Session()
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return st

    def _add(self, st: _Session, found: Found) -> tuple[SourceReference, str | None]:
        """The reference with its id; the text still to index (None when the source was known)."""
        ref, new = st.catalog.add(found.ref)
        return ref, found.text if new else None

    # --- turn_start / before_llm_call -------------------------------------------------------------
    def turn_start(self, e: TurnStart) -> None:
        st = self.session(e.session.id)
        st.turn, st.user_text = e.turn, e.text
        st.mentions = e.text if "@" in e.text else ""

    def before_llm_call(self, c: LlmCallContext) -> None:
        """Declarations only; a gate must not fail, so every problem is logged and the call goes on."""
        try:
            st = self.session(c.session.id)
            if not st.restored:
                self._restore(st, c)
            if st.mentions:
                self._resolve_mentions(st, c)
            c.effects.declare_all(st.pending)
            st.pending = []
            if len(st.catalog) != st.announced:
                c.effects.declare(
                    MarkerKind.SOURCES_AVAILABLE,
                    count=len(st.catalog),
                    new=len(st.catalog) - st.announced,
                    kinds="+".join(st.catalog.kinds()),
                )
                st.announced = len(st.catalog)
        except Exception:
            log.warning("source provenance: before_llm_call failed; the request goes on", exc_info=True)

    def _resolve_mentions(self, st: _Session, c: LlmCallContext) -> None:
        text, st.mentions = st.mentions, ""
        refs = []
        for found in user_sources(text, c.session.workspace):
            ref, body = self._add(st, found)
            if body is not None:
                st.quotes.add(ref.id, body)
            refs.append(ref.to_dict())
        if refs:
            saved = c.session.state.get(STATE_KEY) or {}
            users = [r for r in saved.get("user_sources", []) if r.get("id") not in {x["id"] for x in refs}]
            saved["user_sources"] = (users + refs)[-MAX_USER_SOURCES:]
            c.session.state.set(STATE_KEY, saved)

    def _restore(self, st: _Session, c: LlmCallContext) -> None:
        """A resumed session: take back the sources its history (and state) name, with their ids."""
        st.restored = True
        calls: dict[str, ToolCall] = {}
        for m in c.history:
            calls.update((tc.id, tc) for tc in m.tool_calls)
            for result in m.tool_results:
                stored = [r for r in map(SourceReference.from_dict, (result.details or {}).get(REFS_KEY) or ()) if r]
                if not stored:
                    continue
                call = calls.get(result.tool_call_id) or ToolCall(result.tool_call_id, result.name, {})
                texts = {f.ref.key: f.text for f in adapt(call, _plain(result), c.session.workspace)}
                for ref in stored:
                    if st.catalog.restore(ref) and ref.key in texts:
                        st.quotes.add(ref.id, texts[ref.key])
        saved = c.session.state.get(STATE_KEY) or {}
        for ref in filter(None, map(SourceReference.from_dict, saved.get("user_sources", ()))):
            if st.catalog.restore(ref) and ref.path:
                try:
                    body = (c.session.workspace / ref.path).read_text("utf-8", errors="replace")
                except OSError:
                    continue
                if sha256_text(body) == ref.sha256:
                    st.quotes.add(ref.id, body)
        st.announced = len(st.catalog)

    # --- after_tool_call --------------------------------------------------------------------------
    async def after_tool_call(self, c: ToolResultContext) -> RewriteResult | None:
        result = c.result
        details = dict(result.details or {})
        foreign = [k for k in (REFS_KEY, DETAILS_KEY) if details.pop(k, None) is not None]  # host-owned keys
        content, forged = defang(result.content)
        found = adapt(c.call, result, c.session.workspace, not_under=c.session.artifacts_dir)
        if not found and not forged and not foreign:
            return None
        st = self.session(c.session.id)
        refs, texts = [], []
        for f in found:
            ref, body = self._add(st, f)
            refs.append(ref)
            if body is not None:
                texts.append((ref.id, body))
        if texts:
            if sum(len(t) for _, t in texts) > THREAD_INDEX_CHARS:
                await asyncio.to_thread(_index_all, st.quotes, texts)
            else:
                _index_all(st.quotes, texts)
        if refs:
            details[REFS_KEY] = [r.to_dict() for r in refs]
        marked = [r for r, f in zip(refs, found, strict=True) if f.marker]
        if marked:
            marker = self.markers.mint(result.tool_call_id, marked)
            content += marker.text
            details[DETAILS_KEY] = marker.token
        if forged:
            details["lookalike_markers"] = forged
        return RewriteResult(content=content if content != result.content else None, details=details)

    # --- after_llm_call ---------------------------------------------------------------------------
    def after_llm_call(self, c: LlmCallResult) -> RewriteText | Retry | None:
        message = c.response.message
        if message.tool_calls or not message.text.strip():
            return None
        st = self._sessions.get(c.session.id)
        if st is None or not len(st.catalog):
            return None
        cites = normalise(message.text, st.catalog)
        hits = st.quotes.find(cites.text, exclude=st.user_text if st.turn == c.turn else "")
        missing = [h for h in hits if h.source_id not in cites.cited]
        if hits and not cites.cited and st.retried_turn != c.turn:
            st.retried_turn = c.turn
            c.effects.declare(MarkerKind.CITATIONS, count=0, missing=len(missing), turn=c.turn)
            c.effects.declare(
                MarkerKind.SOURCE_CITATION_RETRY,
                reason=MISSING_SOURCE_CITATION,
                source=hits[0].source_id,
                words=hits[0].words,
            )
            return Retry(follow_up(hits, st.catalog), MISSING_SOURCE_CITATION)
        if cites.cited or missing or cites.unknown or cites.rewritten:  # an answer with nothing to say: no marker
            st.pending.append(
                Effect(
                    MarkerKind.CITATIONS,
                    {
                        "count": len(cites.cited),
                        "missing": len(missing),
                        "unknown": len(cites.unknown) or None,
                        "rewritten": cites.rewritten or None,
                        "turn": c.turn,
                    },
                )
            )
        return RewriteText(cites.text) if cites.text != message.text else None


def _index_all(index: QuoteIndex, texts: list[tuple[str, str]]) -> None:
    for ref_id, text in texts:
        index.add(ref_id, text)


def _plain(result: ToolResult) -> ToolResult:
    """A result from history with trailing marker blocks removed (as its adapter first saw it)."""
    return replace(result, content=strip_trailing_markers(result.content))


def source_provenance_extension(provenance: SourceProvenance | None = None) -> Extension:
    """The extension (mounted by ``default_extensions``)."""
    p = provenance or SourceProvenance()

    def init(api: ExtensionAPI) -> None:
        api.contribute_system_prompt(SYSTEM_PROMPT)
        api.on(Event.TURN_START, p.turn_start)
        api.on(Event.BEFORE_LLM_CALL, p.before_llm_call)
        api.on(Event.AFTER_TOOL_CALL, p.after_tool_call)
        api.on(Event.AFTER_LLM_CALL, p.after_llm_call)

    return Extension(EXTENSION_ID, init, "tool results carry their sources; answers that quote a source cite it")
