"""Cache verdicts: the prediction reconciled with the usage the provider reported.

``verdict`` compares the predicted read with the reported one and says why they differ, and never
contradicts the reported usage (``contradiction`` states the rule: docs/architecture.md, "Cache
verdicts"). ``judge_call`` runs the prediction and the verdict around a ``CacheMemory``. Token
figures are rescaled by the ratio of the reported prompt size to the o200k estimate
(``expected_read``; OpenAI's steps are taken after rescaling), so lost tokens come out in the
provider's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.analyses.cache.loss import priced_loss
from ctxscope.inspector.analyses.cache.memory import CacheMemory, reported
from ctxscope.inspector.analyses.cache.prediction import (
    OPENAI_MINIMUM,
    CachePrediction,
    Observed,
    anthropic_minimum,
    cache_family,
    openai_round,
    predict_cache,
)
from ctxscope.inspector.analyses.prices import Price, Unpriced
from ctxscope.inspector.analyses.relation import Relation
from ctxscope.vocab.kinds import CacheVerdict, RelationKind


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
    unpriced: str | None = None  # why ``lost_cost_usd`` is None (``prices.Unpriced``)
    provider_agreement: str | None = None  # the diagnosis held against this verdict (``provider_agreement``)


def expected_read(prediction: CachePrediction, usage: Any) -> int:
    """The predicted read in the provider's units: rescaled by its reported prompt size over our estimate."""
    got = reported(usage)
    total = got[0] if got is not None else 0
    scale = total / prediction.total_tokens if prediction.total_tokens > 0 and total > 0 else 1.0
    if prediction.unrounded_read is not None and scale != 1.0:  # OpenAI: the provider's steps, in its units
        minimum = OPENAI_MINIMUM if prediction.minimum >= OPENAI_MINIMUM else round(prediction.minimum * scale)
        return openai_round(min(total, round(prediction.unrounded_read * scale)), minimum)
    return round(prediction.predicted_read * scale)


def verdict(
    prediction: CachePrediction,
    usage: Any,
    relation: Relation,
    *,
    price: Price | Unpriced | None = None,
    provider_diagnostics: dict | None = None,
) -> CacheJudgement:
    """Reconcile the prediction with reported usage ({input (total), output, cache_read, cache_write}).

    The usage wins: the verdict never contradicts it (docs/architecture.md, "Cache verdicts").
    """
    got = reported(usage)
    p = prediction
    expected = expected_read(p, usage) if got is not None else None

    def result(kind: CacheVerdict, lost: int = 0, detail: str | None = None) -> CacheJudgement:
        # The one loss figure (``loss.py``): paid again at the rate charged instead of a cache read.
        loss = priced_loss(lost, price, written=got[2] if got is not None else 0, ttl=p.ttl)
        return CacheJudgement(
            kind,
            lost,
            loss.usd,
            p.break_pointer,
            p.break_kind,
            p.before_prev_last_breakpoint,
            provider_diagnostics,
            detail,
            expected,
            loss.unpriced,
        )

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
    if lost > 0 and modelled:  # a switch of model starts another cache: its cost is the switch's, not a break's
        kind = CacheVerdict.MODEL_SWITCH if p.break_kind == "model" else CacheVerdict.CLIENT_BREAK
        return result(kind, lost, f"{p.reason}: {p.break_kind} at {p.break_pointer}")
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
    price: Price | Unpriced | None = None,
    provider_diagnostics: dict | None = None,
) -> tuple[CachePrediction, CacheJudgement]:
    """Learn from the call's reported usage, predict, judge, and remember the entries it left.

    The call's own usage first lowers its model's minimum (a write below the table proves the
    table wrong for this call too); Anthropic entries it wrote are remembered for later calls.
    """
    family = cache_family(cur.prompt)
    table = anthropic_minimum(cur.prompt.model) if family == "anthropic" else OPENAI_MINIMUM
    memory.learn(cur.prompt, cur.tokens, usage, table, cur.started_at)
    prediction = predict_cache(prev, cur, relation, memory=memory, scope=scope)
    judgement = verdict(prediction, usage, relation, price=price, provider_diagnostics=provider_diagnostics)
    if family == "anthropic":
        memory.record(
            scope,
            cur.prompt,
            cur.tokens.cumulative,
            prediction.minimum,
            cur.started_at,
            prediction.predicted_read,
            usage,
        )
    return prediction, judgement


LOSS_VERDICTS = frozenset(
    {CacheVerdict.CLIENT_BREAK, CacheVerdict.MODEL_SWITCH, CacheVerdict.TTL_EXPIRED, CacheVerdict.PROVIDER_MISS}
)


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
        out = {
            "provider": "anthropic",
            "comparison_id": comparison,
            "reason": None,
            "missed_tokens": None,
            "reusable_tokens": None,
            "raw": diag,
        }
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
        return {
            "provider": "openai",
            "comparison_id": comparison,
            "status": "not_reported",
            "reason": None,
            "missed_tokens": None,
            "reusable_tokens": None,
            "raw": diag,
        }
    return {
        "provider": "openai",
        "comparison_id": comparison,
        "status": diag.get("type"),
        "reason": diag.get("reason"),
        "missed_tokens": diag.get("cache_missed_tokens"),
        "reusable_tokens": diag.get("comparison_reusable_tokens"),
        "raw": diag,
    }
