"""Cache prediction from prompt structure, reconciled with reported usage.

``predict_cache`` models what the provider should read from its prompt cache given the
predecessor; ``verdict`` compares that with the reported cache read and says why they differ, and
never contradicts the reported usage (``contradiction`` states the rule: docs/architecture.md,
"Cache verdicts"). ``judge_call`` runs both around a ``CacheMemory``: minimums learned from usage
and the Anthropic entries earlier calls of the API key wrote.

Anthropic: a cache entry exists for the prefix ending at each breakpoint (``cache_control`` on a
block; a top-level ``cache_control`` puts one on the last block) whose prefix reaches the model's
minimum length (the table's, or a lower one learned from usage). A breakpoint of this call reads
the longest such entry that is still identical, not expired (5m or 1h) and at most 20 blocks
before it, whether the predecessor or an earlier call wrote it. Changing ``tool_choice``,
``thinking`` or ``output_config`` keeps only tools and system cached; a model change loses
everything. OpenAI: automatic prefix caching of the longest common token prefix from 1,024 tokens
in 128-token steps, about 10 minutes idle (24 h with ``prompt_cache_retention: "24h"``); a model
or service tier change loses everything.

Token figures in a prediction are o200k estimates; ``verdict`` rescales them by the ratio of the
reported prompt size to the estimate (``expected_read``; OpenAI's steps are taken after rescaling),
so lost tokens come out in the provider's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.cache_memory import CacheMemory, anthropic_points, reported
from ctxscope.inspector.analyses.canonical import CanonicalPrompt
from ctxscope.inspector.analyses.prices import Price
from ctxscope.inspector.analyses.relation import Relation, shared_prefix
from ctxscope.vocab.kinds import CacheVerdict, EpochReason, RelationKind
from ctxscope.vocab.tokens import count_tokens

LOOKBACK_BLOCKS = 20
ANTHROPIC_TTL_SECONDS = {"5m": 300, "1h": 3600}
ANTHROPIC_DEFAULT_MINIMUM = 1024
# Substring of the model id -> minimum cacheable prefix (LiteLLM and orq.ai tables, see research).
ANTHROPIC_MINIMUMS = {
    "haiku-4-5": 4096, "opus-4-5": 4096, "opus-4-6": 4096,
    "sonnet-4-6": 2048, "3-haiku": 2048, "3-5-haiku": 2048, "opus-5": 512,
}  # fmt: skip
ANTHROPIC_MESSAGE_INVALIDATORS = ("tool_choice", "thinking", "output_config")
OPENAI_MINIMUM = 1024
OPENAI_STEP = 128
OPENAI_TTL_SECONDS = 600
OPENAI_EXTENDED_TTL_SECONDS = 24 * 3600
OPENAI_INVALIDATORS = ("service_tier",)



class Observed(NamedTuple):
    prompt: CanonicalPrompt
    tokens: TokenBreakdown
    started_at: float  # unix seconds


@dataclass(frozen=True)
class CachePrediction:
    family: str  # "anthropic", "openai" or "unknown"
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


@dataclass(frozen=True)
class CacheJudgement:
    verdict: CacheVerdict
    lost_tokens: int
    lost_cost_usd: float | None
    break_pointer: str | None  # first difference vs the predecessor, also when harmless
    break_segment_kind: str | None
    before_prev_last_breakpoint: bool | None  # True: the difference lies inside the cached region
    provider_diagnostics: dict | None
    detail: str | None = None
    expected_read: int | None = None  # the predicted read in the provider's units (``expected_read``)


def anthropic_minimum(model: str | None) -> int:
    name = (model or "").lower()
    keys = [k for k in ANTHROPIC_MINIMUMS if k in name]
    return ANTHROPIC_MINIMUMS[max(keys, key=len)] if keys else ANTHROPIC_DEFAULT_MINIMUM


def _family(prompt: CanonicalPrompt) -> str:
    return prompt.api.split(".", 1)[0] if prompt.api.split(".", 1)[0] in ("anthropic", "openai") else "unknown"


def _openai_round(tokens: int, minimum: int = OPENAI_MINIMUM) -> int:
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


def _openai_ttl(prompt: CanonicalPrompt) -> float:
    if prompt.cache_policy.get("prompt_cache_retention") == "24h":
        return OPENAI_EXTENDED_TTL_SECONDS
    options = prompt.cache_policy.get("prompt_cache_options")
    ttl = options.get("ttl") if isinstance(options, dict) else None
    if isinstance(ttl, (int, float)) and ttl > 0:
        return float(ttl)
    if isinstance(ttl, str) and ttl[:-1].isdigit() and ttl[-1] in "smh":
        return int(ttl[:-1]) * {"s": 1, "m": 60, "h": 3600}[ttl[-1]]
    return OPENAI_TTL_SECONDS


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
    family = _family(cur.prompt)
    memory = memory if memory is not None else CacheMemory()
    if family == "anthropic":
        return _predict_anthropic(prev, cur, relation, memory, scope)
    if family == "openai":
        return _predict_openai(prev, cur, relation, memory)
    return _prediction("unknown", "unknown_api", cur, 0, None)


def _prediction(family, reason, cur, minimum, last_bp, **kw) -> CachePrediction:
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
    return CachePrediction(family, reason, total_tokens=cur.tokens.total, minimum=minimum,
                           last_breakpoint_index=last_bp, **base)  # fmt: skip


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
        return _prediction("anthropic", "older_entry" if read else "first_call" if prev is None else "not_comparable",
                           cur, minimum, last_bp, predicted_read=read, would_read=read,
                           predicted_write=max(0, cacheable - read), **common)  # fmt: skip
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

    def best(cands) -> int | None:
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
        "anthropic", reason, cur, minimum, last_bp, predicted_read=read,
        predicted_write=max(0, cacheable - read), ttl_expired=would > read, would_read=would, client_loss=loss,
        break_index=break_index, break_pointer=break_pointer, break_kind=break_kind,
        before_prev_last_breakpoint=before, **common,
    )  # fmt: skip


def _predict_openai(prev: Observed | None, cur: Observed, relation: Relation, memory: CacheMemory) -> CachePrediction:
    total = cur.tokens.total
    minimum = memory.minimum("openai", cur.prompt.model, OPENAI_MINIMUM, cur.started_at)
    cacheable = _openai_round(total, minimum)
    last = len(cur.prompt.segments) - 1 if cur.prompt.segments else None
    common: dict[str, Any] = {"cacheable_prefix_tokens": cacheable, "below_minimum": total < minimum}
    if prev is None or relation.kind == RelationKind.NOT_COMPARABLE:
        return _prediction("openai", "first_call" if prev is None else "not_comparable", cur, minimum, last,
                           predicted_write=cacheable, **common)  # fmt: skip
    gap = max(0.0, cur.started_at - prev.started_at)
    prev_minimum = memory.minimum("openai", prev.prompt.model, OPENAI_MINIMUM, prev.started_at)
    prev_cached = _openai_round(prev.tokens.total, prev_minimum)
    alive = gap <= _openai_ttl(prev.prompt)
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
    would = _openai_round(min(shared_tokens, prev.tokens.total), minimum) if prev_cached else 0
    read = would if alive else 0
    loss = max(0, prev_cached - read) if alive and diverged and prev_cached else 0
    if loss:
        reason = {"model": "model_change", "params": "params_change"}.get(break_kind or "", "diverged")
    elif not prev_cached:
        reason = "prev_below_minimum"
    else:
        reason = "prefix_reused" if read else "ttl_expired" if not alive else "nothing_cached"
    return _prediction(
        "openai", reason, cur, minimum, last, predicted_read=read,
        unrounded_read=min(shared_tokens, prev.tokens.total) if read else None,
        predicted_write=max(0, cacheable - read), prev_last_breakpoint_index=prev_last, gap_seconds=gap,
        ttl_expired=would > read, would_read=would, client_loss=loss, break_index=break_index,
        break_pointer=break_pointer, break_kind=break_kind,
        before_prev_last_breakpoint=(diverged and bool(prev_cached)) if break_index is not None else None, **common,
    )  # fmt: skip


def expected_read(prediction: CachePrediction, usage: Any) -> int:
    """The predicted read in the provider's units: rescaled by its reported prompt size over our estimate."""
    got = reported(usage)
    total = got[0] if got is not None else 0
    scale = total / prediction.total_tokens if prediction.total_tokens > 0 and total > 0 else 1.0
    if prediction.unrounded_read is not None and scale != 1.0:  # OpenAI: the provider's steps, in its units
        minimum = OPENAI_MINIMUM if prediction.minimum >= OPENAI_MINIMUM else round(prediction.minimum * scale)
        return _openai_round(min(total, round(prediction.unrounded_read * scale)), minimum)
    return round(prediction.predicted_read * scale)


def verdict(
    prediction: CachePrediction,
    usage: Any,
    relation: Relation,
    *,
    price: Price | None = None,
    provider_diagnostics: dict | None = None,
) -> CacheJudgement:
    """Reconcile the prediction with reported usage ({input (total), output, cache_read, cache_write}).

    The usage wins: the verdict never contradicts it (docs/architecture.md, "Cache verdicts").
    """
    got = reported(usage)
    p = prediction
    expected = expected_read(p, usage) if got is not None else None

    def result(kind: CacheVerdict, lost: int = 0, detail: str | None = None) -> CacheJudgement:
        # Lost tokens are paid again as a write (or plain input) instead of a cache read.
        cost = None
        if price is not None:
            cost = round(lost * max(0.0, price.write_rate(p.ttl) - price.cache_read) / 1e6, 8)
        return CacheJudgement(kind, lost, cost, p.break_pointer, p.break_kind, p.before_prev_last_breakpoint,
                              provider_diagnostics, detail, expected)  # fmt: skip

    if got is None:
        return result(CacheVerdict.UNKNOWN, detail="usage not reported")
    total, read, write = got
    if relation.kind == RelationKind.NOT_COMPARABLE or p.family == "unknown":
        return result(CacheVerdict.HIT if read > 0 else CacheVerdict.UNKNOWN, detail=relation.detail)
    scale = total / p.total_tokens if p.total_tokens > 0 and total > 0 else 1.0
    expected = expected or 0
    # A loss needs the read we saw to be one we modelled: a read where we predicted none means the
    # provider kept something we thought gone, so nothing we can name was lost.
    modelled = read == 0 or expected > 0
    # A break costs what the predecessor had cached beyond what could still be read; when the
    # provider read even that (an older entry we did not model), nothing was lost.
    lost = max(0, round(p.client_loss * scale) - max(0, read - expected)) if p.client_loss > 0 else 0
    if lost > 0 and modelled:
        return result(CacheVerdict.CLIENT_BREAK, lost, f"{p.reason}: {p.break_kind} at {p.break_pointer}")
    would = round(p.would_read * scale)
    ttl_lost = would - max(read, expected)
    if p.ttl_expired and read < would // 2 and ttl_lost > 0 and modelled:
        return result(CacheVerdict.TTL_EXPIRED, ttl_lost, f"{p.gap_seconds or 0:.0f}s since the predecessor")
    if read > 0:
        if expected > 0 and read < expected // 2:
            return result(
                CacheVerdict.PROVIDER_MISS, expected - read, "read less than half the identical cached prefix"
            )
        return result(CacheVerdict.HIT, detail=p.reason)
    if expected > 0:
        return result(CacheVerdict.PROVIDER_MISS, expected, "prefix identical and alive, nothing read")
    if write > 0:  # the provider cached this prompt: it reached the minimum and caching was asked for
        return result(CacheVerdict.EXPECTED_WRITE, detail=p.reason)
    if p.below_minimum or (p.family == "anthropic" and p.last_breakpoint_index is not None and total < p.minimum):
        return result(CacheVerdict.BELOW_MINIMUM, detail=f"prefix below the {p.minimum}-token minimum")
    if p.reason == "no_breakpoints":
        return result(CacheVerdict.NOT_REQUESTED, detail="no cache_control in the request")
    return result(CacheVerdict.EXPECTED_WRITE, detail=p.reason)


def judge_call(
    prev: Observed | None,
    cur: Observed,
    relation: Relation,
    usage: Any,
    memory: CacheMemory,
    *,
    scope: str = "",
    price: Price | None = None,
    provider_diagnostics: dict | None = None,
) -> tuple[CachePrediction, CacheJudgement]:
    """Learn from the call's reported usage, predict, judge, and remember the entries it left.

    The call's own usage first lowers its model's minimum (a write below the table proves the
    table wrong for this call too); Anthropic entries it wrote are remembered for later calls.
    """
    family = _family(cur.prompt)
    table = anthropic_minimum(cur.prompt.model) if family == "anthropic" else OPENAI_MINIMUM
    memory.learn(cur.prompt, cur.tokens, usage, table, cur.started_at)
    prediction = predict_cache(prev, cur, relation, memory=memory, scope=scope)
    judgement = verdict(prediction, usage, relation, price=price, provider_diagnostics=provider_diagnostics)
    if family == "anthropic":
        memory.record(scope, cur.prompt, cur.tokens.cumulative, prediction.minimum, cur.started_at,
                      prediction.predicted_read, usage)  # fmt: skip
    return prediction, judgement


LOSS_VERDICTS = frozenset({CacheVerdict.CLIENT_BREAK, CacheVerdict.TTL_EXPIRED, CacheVerdict.PROVIDER_MISS})


def contradiction(judgement: CacheJudgement, usage: Any, expected: int) -> str | None:
    """How a verdict contradicts the reported usage, None when it does not (docs/architecture.md,
    "Cache verdicts"). ``expected`` is the predicted read in the provider's units (``expected_read``)."""
    got = reported(usage)
    v, lost = judgement.verdict, judgement.lost_tokens
    if got is None:
        return None if v == CacheVerdict.UNKNOWN else f"{v} without reported usage"
    _total, read, write = got
    if v in (CacheVerdict.BELOW_MINIMUM, CacheVerdict.NOT_REQUESTED) and (read or write):
        return f"{v} but the provider reported read {read}, write {write}"
    if v == CacheVerdict.HIT and read <= 0:
        return "hit without a reported read"
    if v == CacheVerdict.EXPECTED_WRITE and read > 0:
        return f"expected_write but the provider read {read}"
    if v in LOSS_VERDICTS:
        if lost <= 0:
            return f"{v} with no tokens lost"
        if read > 0 and expected <= 0:
            return f"{v} but the provider read {read} where none was predicted"
        if v == CacheVerdict.PROVIDER_MISS and read >= expected:
            return f"provider_miss but the provider read {read} of {expected} predicted"
    elif lost:
        return f"{v} with {lost} tokens lost"
    return None


def parse_provider_diagnostics(api: str | None, request_body: Any, response: Any) -> dict | None:
    """The provider's own cache verdict, when the client asked for one; None otherwise.

    Anthropic: request ``diagnostics.previous_message_id``, response ``diagnostics.cache_miss_reason``
    (absent: no divergence; null reason: comparison still pending). OpenAI Responses: request
    ``prompt_cache_options.comparison_response_id``, response ``prompt_cache_diagnostics``.
    """
    if not isinstance(request_body, dict):
        return None
    resp = response if isinstance(response, dict) else {}
    if (api or "").startswith("anthropic"):
        req = request_body.get("diagnostics")
        if not isinstance(req, dict):
            return None
        comparison = req.get("previous_message_id")
        diag = resp.get("diagnostics")
        out = {"provider": "anthropic", "comparison_id": comparison, "reason": None, "missed_tokens": None,
               "reusable_tokens": None, "raw": diag}  # fmt: skip
        if not isinstance(diag, dict):
            out["status"] = "baseline" if comparison is None else "no_divergence"
            return out
        reason = diag.get("cache_miss_reason")
        if not isinstance(reason, dict):
            out["status"] = "pending"
            return out
        missed = reason.get("cache_missed_input_tokens", diag.get("cache_missed_input_tokens"))
        out.update(status=reason.get("type"), reason=reason.get("type"), missed_tokens=missed)
        return out
    options = request_body.get("prompt_cache_options")
    comparison = options.get("comparison_response_id") if isinstance(options, dict) else None
    if not comparison:
        return None
    diag = resp.get("prompt_cache_diagnostics")
    if not isinstance(diag, dict):
        return {"provider": "openai", "comparison_id": comparison, "status": "not_reported", "reason": None,
                "missed_tokens": None, "reusable_tokens": None, "raw": diag}  # fmt: skip
    return {
        "provider": "openai", "comparison_id": comparison, "status": diag.get("type"), "reason": diag.get("reason"),
        "missed_tokens": diag.get("cache_missed_tokens"), "reusable_tokens": diag.get("comparison_reusable_tokens"),
        "raw": diag,
    }  # fmt: skip
