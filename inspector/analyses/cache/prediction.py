"""Cache prediction from prompt structure: what the provider should read from its prompt cache.

``predict_cache`` models the read given the predecessor and a ``CacheMemory`` (minimums learned
from usage, the Anthropic entries earlier calls of the API key wrote); ``verdicts.py`` compares it
with the reported read (docs/architecture.md, "Cache verdicts").

Anthropic: a cache entry exists for the prefix ending at each breakpoint (``cache_control`` on a
block; a top-level ``cache_control`` puts one on the last block) whose prefix reaches the model's
minimum length (the table's, or a lower one learned from usage). A breakpoint of this call reads
the longest such entry that is still identical, not expired (5m or 1h) and at most 20 blocks
before it, whether the predecessor or an earlier call wrote it. Changing ``tool_choice``,
``thinking`` or ``output_config`` keeps only tools and system cached; a model change loses
everything. OpenAI: automatic prefix caching of the longest common token prefix from 1,024 tokens
in 128-token steps, alive as long as ``openai_retention.py`` says; a model or service tier change
loses everything.
Token figures here are o200k estimates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.cache.memory import CacheMemory, anthropic_points
from ctxscope.inspector.analyses.cache.openai_retention import openai_ttl_seconds
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.relation import Relation, shared_prefix
from ctxscope.vocab.kinds import EpochReason, RelationKind
from ctxscope.vocab.tokens import count_tokens

CacheFamily = Literal["anthropic", "openai", "unknown"]

LOOKBACK_BLOCKS = 20
ANTHROPIC_TTL_SECONDS = {"5m": 300, "1h": 3600}
ANTHROPIC_DEFAULT_MINIMUM = 1024
# Substring of the model id -> minimum cacheable prefix (LiteLLM and orq.ai tables, see research).
ANTHROPIC_MINIMUMS = {
    "haiku-4-5": 4096,
    "opus-4-5": 4096,
    "opus-4-6": 4096,
    "sonnet-4-6": 2048,
    "3-haiku": 2048,
    "3-5-haiku": 2048,
    "opus-5": 512,
}
ANTHROPIC_MESSAGE_INVALIDATORS = ("tool_choice", "thinking", "output_config")
OPENAI_MINIMUM = 1024
OPENAI_STEP = 128
OPENAI_INVALIDATORS = ("service_tier",)


class Observed(NamedTuple):
    prompt: CanonicalPrompt
    tokens: TokenBreakdown
    started_at: float  # unix seconds


@dataclass(frozen=True)
class CachePrediction:
    family: CacheFamily
    # Why predicted_read is what it is: first_call, not_comparable, no_breakpoints, prefix_reused,
    # older_entry (an entry an earlier call wrote), diverged, model_change, params_change,
    # lookback_exceeded, prev_below_minimum, ttl_expired, nothing_cached, unknown_api.
    reason: str
    predicted_read: int  # estimated tokens read from cache
    predicted_write: int  # estimated tokens written (Anthropic; OpenAI: newly cacheable)
    cacheable_prefix_tokens: int  # tokens up to this call's last cache point, 0 below the minimum
    total_tokens: int  # this call's estimate
    minimum: int
    below_minimum: bool
    last_breakpoint_index: int | None  # this call's last cache point (segment index)
    prev_last_breakpoint_index: int | None
    gap_seconds: float | None
    ttl_expired: bool  # an entry that would have been read had expired
    would_read: int  # the read had nothing expired
    client_loss: int  # tokens of the predecessor's live cache this call's own changes made unreadable
    break_index: int | None  # segment index of the first difference (in the current prompt)
    break_pointer: str | None
    break_kind: str | None  # segment kind, "model", "params" or "lookback"
    before_prev_last_breakpoint: bool | None
    ttl: str | None  # TTL of the last cache point ("5m", "1h"), for pricing writes
    # OpenAI: the readable common token prefix before rounding to the provider's steps (estimate),
    # so the expected read is rounded in the provider's own units; None: predicted_read is final.
    unrounded_read: int | None = None


def anthropic_minimum(model: str | None) -> int:
    name = (model or "").lower()
    keys = [k for k in ANTHROPIC_MINIMUMS if k in name]
    return ANTHROPIC_MINIMUMS[max(keys, key=len)] if keys else ANTHROPIC_DEFAULT_MINIMUM


def cache_family(prompt: CanonicalPrompt) -> CacheFamily:
    head = prompt.api.split(".", 1)[0]
    return "anthropic" if head == "anthropic" else "openai" if head == "openai" else "unknown"


def openai_round(tokens: int, minimum: int = OPENAI_MINIMUM) -> int:
    """The longest cached prefix of ``tokens``: the minimum, then whole 128-token steps."""
    return 0 if tokens < minimum else minimum + (tokens - minimum) // OPENAI_STEP * OPENAI_STEP


def _common_tokens(a: str, b: str) -> int:
    """Tokens of the longest common token prefix of two texts (o200k): the common characters' count,
    less the last token, which may merge differently with what follows."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # the longest common prefix by bisection: each comparison is one memcmp
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    c = lo
    return max(0, count_tokens(b[:c]) - 1) if c else 0


def _first_param_change(a: CanonicalPrompt, b: CanonicalPrompt, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if a.params.get(k) != b.params.get(k)), None)


def _break_kind(prev: CanonicalPrompt, cur: CanonicalPrompt, index: int) -> str:
    return (cur.segments[index] if index < len(cur.segments) else prev.segments[index]).kind


def predict_cache(
    prev: Observed | tuple | None,
    cur: Observed | tuple,
    relation: Relation,
    *,
    memory: CacheMemory | None = None,
    scope: str = "",
) -> CachePrediction:
    """What the provider should read from cache for ``cur`` after ``prev`` (None: first call).

    ``memory`` holds the minimums learned from reported usage and the Anthropic entries earlier
    calls of ``scope`` (the API key) wrote; without it the table and the predecessor alone decide.
    """
    cur = Observed(*cur)
    prev = Observed(*prev) if prev is not None else None
    family = cache_family(cur.prompt)
    memory = memory if memory is not None else CacheMemory()
    if family == "anthropic":
        return _predict_anthropic(prev, cur, relation, memory, scope)
    if family == "openai":
        return _predict_openai(prev, cur, relation, memory)
    return _prediction("unknown", "unknown_api", cur, 0, None)


def _prediction(
    family: CacheFamily, reason: str, cur: Observed, minimum: int, last_bp: int | None, **kw: Any
) -> CachePrediction:
    base: dict[str, Any] = {
        "predicted_read": 0,
        "predicted_write": 0,
        "cacheable_prefix_tokens": 0,
        "below_minimum": False,
        "prev_last_breakpoint_index": None,
        "gap_seconds": None,
        "ttl_expired": False,
        "would_read": 0,
        "client_loss": 0,
        "break_index": None,
        "break_pointer": None,
        "break_kind": None,
        "before_prev_last_breakpoint": None,
        "ttl": None,
        "unrounded_read": None,
    }
    base.update(kw)
    return CachePrediction(
        family, reason, total_tokens=cur.tokens.total, minimum=minimum, last_breakpoint_index=last_bp, **base
    )


def _predict_anthropic(
    prev: Observed | None, cur: Observed, relation: Relation, memory: CacheMemory, scope: str
) -> CachePrediction:
    minimum = memory.minimum("anthropic", cur.prompt.model, anthropic_minimum(cur.prompt.model), cur.started_at)
    points = anthropic_points(cur.prompt)
    cum = cur.tokens.cumulative
    last_bp = max(points) if points else None
    cacheable = cum[last_bp] if last_bp is not None and cum[last_bp] >= minimum else 0
    common: dict[str, Any] = {
        "cacheable_prefix_tokens": cacheable,
        "below_minimum": last_bp is not None and not cacheable,
        "ttl": points.get(last_bp) if last_bp is not None else None,
    }
    if last_bp is None:
        return _prediction("anthropic", "no_breakpoints", cur, minimum, None, **common)
    older = memory.best_entry(scope, cur.prompt, points, cur.started_at)
    if prev is None or relation.kind == RelationKind.NOT_COMPARABLE:
        read = cum[older] if older is not None else 0
        return _prediction(
            "anthropic",
            "older_entry" if read else "first_call" if prev is None else "not_comparable",
            cur,
            minimum,
            last_bp,
            predicted_read=read,
            would_read=read,
            predicted_write=max(0, cacheable - read),
            **common,
        )
    prev_points = anthropic_points(prev.prompt)
    prev_cum = prev.tokens.cumulative
    prev_min = memory.minimum("anthropic", prev.prompt.model, anthropic_minimum(prev.prompt.model), prev.started_at)
    entries = {j: ttl for j, ttl in prev_points.items() if prev_cum[j] >= prev_min}
    gap = max(0.0, cur.started_at - prev.started_at)
    alive = [j for j, ttl in entries.items() if gap <= ANTHROPIC_TTL_SECONDS.get(ttl, 300)]
    prev_last = max(prev_points) if prev_points else None
    common.update(prev_last_breakpoint_index=prev_last, gap_seconds=gap)

    # Where this call stops matching the predecessor's cache: a prompt difference, a
    # message-level parameter change, or (first of all) another model/provider/API.
    limit = shared_prefix(prev.prompt.hashes, cur.prompt.hashes)
    diverged = limit < len(prev.prompt.segments)
    break_index = limit if diverged else None
    break_pointer, break_kind = None, None
    if diverged:
        break_pointer, break_kind = relation.pointer, _break_kind(prev.prompt, cur.prompt, limit)
    param = _first_param_change(prev.prompt, cur.prompt, ANTHROPIC_MESSAGE_INVALIDATORS)
    if param:
        first_msg = next((i for i, s in enumerate(cur.prompt.segments) if s.kind not in ("tools", "system")), limit)
        if first_msg < limit or not diverged:
            limit = min(limit, first_msg)
            break_index, break_pointer, break_kind = first_msg, f"/{param}", "params"
    if relation.epoch_reason in (EpochReason.MODEL_CHANGE, EpochReason.PROVIDER_CHANGE, EpochReason.API_CHANGE):
        limit, break_index, break_pointer, break_kind = 0, 0, "/model", "model"

    def best(cands: Iterable[int]) -> int | None:
        ok = [j for j in cands if j < limit and any(j <= b <= j + LOOKBACK_BLOCKS for b in points)]
        return max(ok) if ok else None

    now, no_ttl = best(alive), best(entries)
    older_wins = older is not None and (now is None or older > now)
    if older_wins:  # an entry that an earlier call wrote (still alive) reaches further
        now = older
    read = cum[now] if now is not None else 0
    would = max(read, cum[no_ttl] if no_ttl is not None else 0)
    potential = prev_cum[max(alive)] if alive else 0
    reason, loss = "prefix_reused" if read else "nothing_cached", 0
    if older_wins and (not alive or read >= potential):
        reason = "older_entry"
    elif alive and limit <= max(alive):
        loss = max(0, potential - read)
        reason = "model_change" if break_kind == "model" else "params_change" if break_kind == "params" else "diverged"
    elif alive and (now is None or now < max(alive)):  # intact, but no breakpoint reaches back to it
        loss, reason = max(0, potential - read), "lookback_exceeded"
        break_pointer = cur.prompt.segments[last_bp].pointer
        break_index, break_kind = None, "lookback"
    elif not entries and prev_points:
        reason = "prev_below_minimum"
    elif entries and not alive:
        reason = "ttl_expired"
    before = break_index <= prev_last if break_index is not None and prev_last is not None else None
    if break_kind == "model":
        before = bool(alive)
    return _prediction(
        "anthropic",
        reason,
        cur,
        minimum,
        last_bp,
        predicted_read=read,
        predicted_write=max(0, cacheable - read),
        ttl_expired=would > read,
        would_read=would,
        client_loss=loss,
        break_index=break_index,
        break_pointer=break_pointer,
        break_kind=break_kind,
        before_prev_last_breakpoint=before,
        **common,
    )


def _predict_openai(prev: Observed | None, cur: Observed, relation: Relation, memory: CacheMemory) -> CachePrediction:
    total = cur.tokens.total
    minimum = memory.minimum("openai", cur.prompt.model, OPENAI_MINIMUM, cur.started_at)
    cacheable = openai_round(total, minimum)
    last = len(cur.prompt.segments) - 1 if cur.prompt.segments else None
    common: dict[str, Any] = {"cacheable_prefix_tokens": cacheable, "below_minimum": total < minimum}
    if prev is None or relation.kind == RelationKind.NOT_COMPARABLE:
        return _prediction(
            "openai",
            "first_call" if prev is None else "not_comparable",
            cur,
            minimum,
            last,
            predicted_write=cacheable,
            **common,
        )
    gap = max(0.0, cur.started_at - prev.started_at)
    prev_minimum = memory.minimum("openai", prev.prompt.model, OPENAI_MINIMUM, prev.started_at)
    prev_cached = openai_round(prev.tokens.total, prev_minimum)
    alive = gap <= openai_ttl_seconds(prev.prompt.cache_policy)
    prev_last = len(prev.prompt.segments) - 1 if prev.prompt.segments else None
    shared = shared_prefix(prev.prompt.hashes, cur.prompt.hashes)
    diverged = shared < len(prev.prompt.segments)
    break_index = shared if diverged else None
    break_pointer, break_kind = None, None
    if diverged:
        break_pointer, break_kind = relation.pointer, _break_kind(prev.prompt, cur.prompt, shared)
    param = _first_param_change(prev.prompt, cur.prompt, OPENAI_INVALIDATORS)
    if (
        relation.epoch_reason in (EpochReason.MODEL_CHANGE, EpochReason.PROVIDER_CHANGE, EpochReason.API_CHANGE)
        or param
    ):
        shared, break_index, diverged = 0, 0, True
        break_pointer, break_kind = ("/model", "model") if not param else (f"/{param}", "params")
    shared_tokens = cur.tokens.prefix_tokens(shared)
    in_both = shared < min(len(prev.prompt.segments), len(cur.prompt.segments))
    if diverged and in_both and not param and break_kind != "model":
        # The provider caches tokens, not items: the differing segment's common token prefix counts too.
        a, b = prev.prompt.segments[shared], cur.prompt.segments[shared]
        if (a.kind, a.role) == (b.kind, b.role):
            shared_tokens += _common_tokens(a.text, b.text)
    would = openai_round(min(shared_tokens, prev.tokens.total), minimum) if prev_cached else 0
    read = would if alive else 0
    loss = max(0, prev_cached - read) if alive and diverged and prev_cached else 0
    if loss:
        reason = {"model": "model_change", "params": "params_change"}.get(break_kind or "", "diverged")
    elif not prev_cached:
        reason = "prev_below_minimum"
    else:
        reason = "prefix_reused" if read else "ttl_expired" if not alive else "nothing_cached"
    return _prediction(
        "openai",
        reason,
        cur,
        minimum,
        last,
        predicted_read=read,
        unrounded_read=min(shared_tokens, prev.tokens.total) if read else None,
        predicted_write=max(0, cacheable - read),
        prev_last_breakpoint_index=prev_last,
        gap_seconds=gap,
        ttl_expired=would > read,
        would_read=would,
        client_loss=loss,
        break_index=break_index,
        break_pointer=break_pointer,
        break_kind=break_kind,
        before_prev_last_breakpoint=(diverged and bool(prev_cached)) if break_index is not None else None,
        **common,
    )
