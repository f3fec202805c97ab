"""What the analysis says of one call, as the columns written onto its row (docs/architecture.md,
"One INSERT per call"): JSON members that are null, empty or (for counts) zero are left out, and
the store's readers put them back (``store/columns.with_defaults``), so a call row stays small."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.cache.prediction import CachePrediction
from ctxscope.inspector.analyses.cache.verdicts import CacheJudgement
from ctxscope.inspector.analyses.markers import Marker, has_compaction_before
from ctxscope.inspector.analyses.relation import Relation
from ctxscope.inspector.analyses.threads import Placement
from ctxscope.inspector.base import json_text
from ctxscope.vocab.kinds import GroupedBy

ANALYSIS_VERSION = 1


@dataclass(frozen=True)
class Analysis:
    """Everything the analysis says of one call, as written onto its row."""

    session: str
    session_source: str
    seq: int | None  # None: the writer numbers the call as it inserts it
    placement: Placement | None  # None for exchanges that are not LLM calls
    relation: Relation
    tokens: TokenBreakdown | None
    prediction: CachePrediction | None
    cache: CacheJudgement | None
    markers: tuple[Marker, ...]
    response_id: str | None
    attempt: int
    retry_of: str | None
    grouped_by: GroupedBy

    def columns(self) -> dict:
        p, r, c = self.placement, self.relation, self.cache
        cache = None
        if c is not None:
            pred = self.prediction
            cache = {
                "verdict": c.verdict,
                "lost_tokens": c.lost_tokens,
                "lost_cost_usd": c.lost_cost_usd,
                "unpriced": c.unpriced,
                "break_pointer": c.break_pointer,
                "break_segment_kind": c.break_segment_kind,
                "before_prev_last_breakpoint": c.before_prev_last_breakpoint,
                "detail": c.detail,
                "provider_diagnostics": c.provider_diagnostics,
                "expected_read": c.expected_read,
                # "none" is the default the readers put back (store/columns.py)
                "provider_agreement": c.provider_agreement if c.provider_agreement != "none" else None,
            }
            if pred is not None:
                cache.update(
                    family=pred.family,
                    reason=pred.reason,
                    predicted_read=pred.predicted_read,
                    predicted_write=pred.predicted_write,
                    cacheable_prefix_tokens=pred.cacheable_prefix_tokens,
                    minimum=pred.minimum,
                    ttl=pred.ttl,
                    gap_seconds=round(pred.gap_seconds, 3) if pred.gap_seconds is not None else None,
                )
        return {
            "session": self.session,
            "session_source": self.session_source,
            "grouped_by": self.grouped_by,
            "seq": self.seq,
            "thread": p.thread_id if p else None,
            "parent_thread": p.parent_thread_id if p else None,
            "predecessor": p.predecessor if p else None,
            "relation": r.kind,
            "pointer": r.pointer,
            "epoch_reason": r.epoch_reason,
            "relation_detail": _dumps(
                _compact(
                    {"detail": r.detail, "shared_segments": r.shared_segments, "marker_moves": list(r.marker_moves)}
                )
            ),
            "tokens_estimated": self.tokens.total if self.tokens else None,
            "tokens_by_category": _dumps(_compact(self.tokens.by_category, zeros=True)) if self.tokens else None,
            "cache_verdict": c.verdict if c else None,
            "cache": _dumps(_compact(cache)),
            "cache_lost_tokens": c.lost_tokens if c else None,
            "cache_lost_usd": c.lost_cost_usd if c else None,
            "markers": _dumps([{"kind": m.kind, "pointer": m.pointer, "detail": m.detail} for m in self.markers])
            if self.markers
            else "[]",
            "has_compaction_before": int(has_compaction_before(self.markers)),
            "response_id": self.response_id,
            "attempt": self.attempt,
            "retry_of": self.retry_of,
            "analysis_version": ANALYSIS_VERSION,
        }


def _compact(value: dict | None, *, zeros: bool = False) -> dict | None:
    """Without null and empty-list members (and zero counts with ``zeros``): the store's readers put
    them back (store/columns.py, ``with_defaults``), so a call row stays small (docs/architecture.md,
    "Body storage")."""
    if value is None:
        return None
    return {k: v for k, v in value.items() if v is not None and v != [] and not (zeros and v == 0)}


_COMPACT = json_text.encoder(default=str)  # built once


def _dumps(value: Any) -> str | None:
    return None if value is None else _COMPACT(value)
