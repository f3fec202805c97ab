"""Advice per cause: for each finding that costs money, the session rebuilt without its cause,
replayed through the advisor's cache model, and the saving in tokens and dollars
(docs/architecture.md, "The cache advisor").

The what-if sessions: a changing span held at its first value; the tools in one order; Claude
Code's billing header block dropped; a TTL that covers the real gaps (1h breakpoints for Anthropic,
``prompt_cache_options.ttl`` for OpenAI); a breakpoint on the last block where the marked prefix is
below the model's minimum; and the best breakpoint placement, one kind of advice
among the others. Each rewrite is of the request bodies (``rewrite.py``), so ``--verify`` sends
exactly the what-if the figure was computed on. Pure: findings and a session in, advice out.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.advisor import shape_whatif
from ctxscope.inspector.advisor.body_whatif import (
    Scan,
    bodies_in_order,
    first_held,
    rebuilt,
    scan_pointer,
    streamed,
    without_billing,
)
from ctxscope.inspector.advisor.findings import Finding
from ctxscope.inspector.advisor.model import Session, SessionCall
from ctxscope.inspector.advisor.replay import TTL, Placement, Replay, replay
from ctxscope.inspector.advisor.rewrite import dropped, held, tool_name, tools_sorted, value_at, with_options
from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.cache.memory import anthropic_points
from ctxscope.inspector.analyses.cache.openai_retention import IN_MEMORY_SECONDS, OPTION_TTL_SECONDS
from ctxscope.inspector.analyses.cache.prediction import anthropic_minimum

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}|\b\d{10,13}\b")
REQUEST_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}|\b[0-9a-fA-F]{12,}\b|\b[A-Za-z]+_[A-Za-z0-9]{8,}\b")

AS_SENT: Placement = lambda _i, call: anthropic_points(call.prompt)  # noqa: E731


@dataclass(frozen=True)
class CauseAdvice:
    """One cause removed: what to change, and what the session costs without it."""

    cause: str  # changing_span | tool_order | billing_header | ttl_gaps | below_minimum | placement | routing
    pointer: str | None  # where the cause is, in the request body
    change: str  # what to change, in the user's terms
    before: str | None  # the snippet as sent ...
    after: str | None  # ... and as it changes (or as advised)
    calls: tuple[SessionCall, ...]  # the what-if session: bodies rewritten, prompts re-read
    placement: Placement  # breakpoints of the what-if (Anthropic)
    route: Callable[[SessionCall], str] | None  # prompt_cache_key routing of the what-if (OpenAI)
    result: Replay
    baseline: Replay  # the session as sent
    # the body rewrite of a what-if made from shapes (its calls carry no body): ``--verify`` applies it
    # to each body as sent, in order, one at a time
    rewrite: Callable[[int, SessionCall], Any] | None = None

    @property
    def saving_usd(self) -> float:
        return round(self.baseline.cost_usd - self.result.cost_usd, 6)

    @property
    def saving_tokens(self) -> int:
        """Tokens read from the cache that the session as sent paid in full (or wrote)."""
        return self.result.cache_read - self.baseline.cache_read

    @property
    def saving_pct(self) -> float:
        base = self.baseline.cost_usd
        return round(100 * self.saving_usd / base, 2) if base > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "cause": self.cause,
            "pointer": self.pointer,
            "change": self.change,
            "before": self.before,
            "after": self.after,
            "saving_tokens": self.saving_tokens,
            "saving_usd": self.saving_usd,
            "saving_pct": self.saving_pct,
            **{f"what_if_{k}": v for k, v in self.result.as_dict().items()},
        }


@dataclass(frozen=True)
class Baseline:
    """The session as sent, replayed, and the placements a what-if may use when it has none."""

    replay: Replay
    placements: Sequence[tuple[str, Placement]] = ()  # (in words, placement)
    counter: TokenCounter = dataclasses.field(default_factory=TokenCounter)


def _what_if(
    session: Session,
    calls: tuple[SessionCall, ...],
    base: Baseline,
    cause: str,
    pointer: str | None,
    change: str,
    snippets: tuple[str | None, str | None],
    rewrite: Callable[[int, SessionCall], Any] | None = None,
    placement: Placement = AS_SENT,
    route: Callable[[SessionCall], str] | None = None,
    reshape: Callable[[tuple[SessionCall, ...]], tuple[SessionCall, ...]] | None = None,
) -> CauseAdvice:
    """``rewrite``: of each body; ``reshape``: the same what-if made from prompt shapes (calls
    rebuilt by ``shape.rebuild``, which have no body: ``shape_whatif.py``)."""
    by_shape = shape_whatif.shaped(calls)
    if by_shape:
        try:
            new = reshape(calls) if reshape is not None else calls if rewrite is None else None
        except shape_whatif.NeedsBodies:
            new = None
        if new is None:
            assert rewrite is not None
            new = streamed(session, calls, rewrite, base.counter)
    else:
        new = rebuilt(calls, rewrite, base.counter) if rewrite else calls
    result = replay(new, placement, session.prices, route=route)
    if placement is AS_SENT and _unmarked(new):  # nothing is cached as sent: with the placement that pays
        best = min(
            ((replay(new, p, session.prices), p, words) for words, p in base.placements),
            key=lambda r: r[0].cost_usd,
            default=None,
        )
        if best is not None and best[0].cost_usd < result.cost_usd:
            result, placement = best[0], best[1]
            change = f"{change}, and add breakpoints at {best[2]}"
    kept = rewrite if by_shape else None
    return CauseAdvice(cause, pointer, change, *snippets, new, placement, route, result, base.replay, kept)


def _unmarked(calls: Sequence[SessionCall]) -> bool:
    return all(c.family == "anthropic" and not anthropic_points(c.prompt) for c in calls)


def _kind_of_span(text: str) -> str:
    if TIMESTAMP.search(text):
        return "a timestamp"
    if REQUEST_ID.search(text):
        return "an id"
    return "text"


def _span_words(after: str, offset: int) -> str:
    """What changes, from the excerpt around the first differing character."""
    return _kind_of_span(after)


def _churn(session: Session, calls: tuple[SessionCall, ...], sent: Baseline, f: Finding) -> CauseAdvice | None:
    ev = f.evidence or {}
    pointer = ev.get("pointer")
    if not isinstance(pointer, str):
        return None
    by_shape = shape_whatif.shaped(calls)
    if ev.get("reordered"):
        try:
            if not by_shape:
                raise shape_whatif.NeedsBodies(pointer)
            orders = {tuple(shape_whatif.tool_names(c)) for c in calls}
            names = shape_whatif.tool_names(calls[0])
        except shape_whatif.NeedsBodies:  # from the bodies, one at a time
            orders, head = set(), None
            for _c, body in bodies_in_order(session, calls):
                if isinstance(body, dict):
                    order = [tool_name(t) for t in body.get("tools") or []]
                    orders.add(tuple(order))
                    head = order if head is None else head
            names = head or []
        return _what_if(
            session,
            calls,
            sent,
            "tool_order",
            pointer,
            f"`{pointer}`: the tools are serialised in {len(orders)} different orders; "
            "send them in one fixed order (sorted by name)",
            (", ".join(names[:6]), ", ".join(sorted(names)[:6])),
            lambda _i, c: tools_sorted(c.body),
            reshape=shape_whatif.tools_sorted,
        )
    reshape: Callable[[tuple[SessionCall, ...]], tuple[SessionCall, ...]] | None
    if by_shape and not shape_whatif.billing_at(calls, pointer) and shape_whatif.first_at(calls, pointer) is not None:
        n = shape_whatif.changed_on(calls, pointer)
        rewrite = first_held(pointer)  # not replayed (``reshape`` is): what ``--verify`` sends
        reshape = lambda cs: shape_whatif.held(cs, pointer)  # noqa: E731
    else:  # from the bodies (one at a time when made from shapes): a billing header, a pointer in a segment
        scan = scan_pointer(session, calls, pointer)
        if scan.billing_here:
            return _billing(session, calls, sent, pointer, ev, scan)
        first = scan.first
        if first is None:
            return None
        n = scan.changed
        rewrite = lambda _i, c: held(c.body, pointer, first) if value_at(c.body, pointer) is not None else c.body  # noqa: E731
        reshape = None
    what = _span_words(str(ev.get("after") or ""), int(ev.get("offset") or 0))
    return _what_if(
        session,
        calls,
        sent,
        "changing_span",
        pointer,
        f"`{pointer}` char {ev.get('offset')}: {what} that changes on {n} of {len(calls) - 1} calls; "
        "keep this text fixed and move the changing part to the last user message",
        (ev.get("before"), ev.get("after")),
        rewrite,
        reshape=reshape,
    )


def _billing(
    session: Session, calls: tuple[SessionCall, ...], sent: Baseline, pointer: str, ev: dict, scan: Scan | None = None
) -> CauseAdvice:
    rewrite = without_billing(pointer)
    if not (scan or scan_pointer(session, calls, pointer)).billing_any:
        rewrite = lambda _i, c: dropped(c.body, pointer)  # noqa: E731  # a billing_header finding's own block
    return _what_if(
        session,
        calls,
        sent,
        "billing_header",
        pointer,
        f"`{pointer}`: Claude Code's billing header block changes on every call and this upstream caches "
        "it as prompt text; turn Claude Code's attribution header off for this upstream, or drop the block",
        (ev.get("before"), ev.get("after")),
        rewrite,
    )


def _gaps(calls: Sequence[SessionCall]) -> list[float]:
    return [b.started_at - a.started_at for a, b in itertools.pairwise(calls)]


def _ttl_gaps(session: Session, calls: tuple[SessionCall, ...], sent: Baseline, family: str) -> CauseAdvice | None:
    gaps = _gaps(calls)
    if family == "openai":
        long = [g for g in gaps if IN_MEMORY_SECONDS < g <= OPTION_TTL_SECONDS["12h"]]
        if not long:
            return None
        ttl = "30m" if max(long) <= OPTION_TTL_SECONDS["30m"] else "12h"
        return _what_if(
            session,
            calls,
            sent,
            "ttl_gaps",
            "/prompt_cache_options/ttl",
            f"{len(long)} gap(s) between calls of up to {max(long) / 60:.0f} min outlive the 5-minute in-memory "
            f'cache; send prompt_cache_options: {{"ttl": "{ttl}"}}',
            (None, f'"prompt_cache_options": {{"ttl": "{ttl}"}}'),
            lambda _i, c: with_options(c.body, ttl=ttl),
            reshape=lambda cs: shape_whatif.with_options(cs, ttl=ttl),
        )
    long = [g for g in gaps if TTL["5m"] < g <= TTL["1h"]]
    points = [(c, p) for c in calls for p, t in anthropic_points(c.prompt).items() if t == "5m"]
    if not long or not points:
        return None
    pointer = points[0][0].prompt.segments[points[0][1]].pointer
    return _what_if(
        session,
        calls,
        sent,
        "ttl_gaps",
        pointer,
        f"{len(long)} gap(s) between calls of up to {max(long) / 60:.0f} min outlive the 5-minute cache; "
        'give the breakpoints a 1-hour TTL: "cache_control": {"type": "ephemeral", "ttl": "1h"}',
        ('{"type": "ephemeral"}', '{"type": "ephemeral", "ttl": "1h"}'),
        placement=lambda _i, c: dict.fromkeys(anthropic_points(c.prompt), "1h"),
    )


def _below_minimum(session: Session, calls: tuple[SessionCall, ...], sent: Baseline, family: str) -> CauseAdvice | None:
    """Anthropic: a last breakpoint whose prefix is below the model's minimum caches nothing, though
    the whole prompt reaches it; the what-if adds one on the prompt's last block. A prompt below
    the minimum everywhere (and any OpenAI prompt below 1,024 tokens) can save nothing: no advice."""
    if family != "anthropic":
        return None
    short = []
    for call in calls:
        points = anthropic_points(call.prompt)
        minimum = anthropic_minimum(call.model)
        if points and call.tokens.cumulative[max(points)] < minimum <= call.tokens.total:
            short.append((call, max(points), minimum))
    if not short:
        return None
    call, point, minimum = short[0]
    pointer = call.prompt.segments[point].pointer
    tokens = call.tokens.cumulative[point]

    def placement(_i: int, c: SessionCall) -> dict[int, str]:
        points = dict(anthropic_points(c.prompt))
        if c.prompt.segments:
            points[len(c.prompt.segments) - 1] = points[max(points)] if points else "5m"
        return points

    return _what_if(
        session,
        calls,
        sent,
        "below_minimum",
        pointer,
        f"`{pointer}`: the prefix up to this breakpoint is {tokens} tokens, below {call.model}'s {minimum}-token "
        f"minimum, so it caches nothing on {len(short)} of {len(calls)} calls; add a breakpoint on the last "
        "message, where the prompt reaches the minimum",
        (f"cache_control at {pointer} ({tokens} tokens)", "cache_control also on the last message"),
        placement=placement,
    )


def cause_advice(
    session: Session,
    calls: tuple[SessionCall, ...],
    family: str,
    found: Sequence[Finding],
    placements: Sequence[tuple[str, Placement]] = (),
) -> list[CauseAdvice]:
    """One advice per costly cause, the most dollars saved first (none that saves nothing);
    ``placements``: the breakpoint placements a session sent without any is tried with."""
    sent = Baseline(replay(calls, AS_SENT, session.prices), placements)
    out: list[CauseAdvice] = []
    seen: set[tuple[str, str | None]] = set()
    for f in found:
        advice = None
        if f.kind == "cache_churn":
            advice = _churn(session, calls, sent, f)
        elif f.kind in ("billing_header", "per_request_metadata"):
            pointer = (f.evidence or {}).get("pointer")
            if isinstance(pointer, str):
                advice = _billing(session, calls, sent, pointer, f.evidence or {})
        if advice is not None and (advice.cause, advice.pointer) not in seen:
            seen.add((advice.cause, advice.pointer))
            out.append(advice)
    for extra in (_ttl_gaps(session, calls, sent, family), _below_minimum(session, calls, sent, family)):
        if extra is not None:
            out.append(extra)
    return [a for a in out if a.saving_usd > 0]
