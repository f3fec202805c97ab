"""Effect markers inferred from any client's prompts.

Only what the prompts themselves show: reminders the client injected since the predecessor
(``<system-reminder>`` blocks in new segments, whole or embedded), a compaction (the history was
replaced by something much shorter, early in the conversation, often summary-shaped; or a
Responses ``compaction`` item appeared), and the tools that ran between the predecessor and this
call (the tool results that are new in this call). Our own agent declares these through
annotation headers instead; the store merges both. A retry is not read from the prompt: the same
prompt again after a completed answer is a new request. Only the store's retry link (the same body
soon after a failed, cut-off or unanswered call) makes a retry marker (inspector/pipeline/analyze.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment, split_reminders
from ctxscope.inspector.analyses.relation import Relation
from ctxscope.vocab.kinds import MarkerKind, RelationKind

# A compaction leaves at most this share of the predecessor's tokens ...
COMPACTION_MAX_RATIO = 0.6
# ... and diverges within this many conversation segments from the start.
COMPACTION_EARLY_SEGMENTS = 4
_SUMMARY_RE = re.compile(
    r"<summary>|\bsummary\b|\bsummari[sz]ed?\b|\bcompact(?:ed|ion)\b|continued from a previous conversation",
    re.IGNORECASE,
)
_PREVIEW = 120


@dataclass(frozen=True)
class Marker:
    kind: str  # a MarkerKind; a marker our agent declared may carry a kind of its own
    pointer: str | None
    detail: dict = field(default_factory=dict)


def has_compaction_before(markers: list[Marker] | tuple[Marker, ...]) -> bool:
    """True for the first call after a compaction."""
    return any(m.kind == MarkerKind.COMPACTION for m in markers)


def infer_markers(
    prev: CanonicalPrompt | None,
    cur: CanonicalPrompt,
    relation: Relation,
    prev_tokens: int | None,
    cur_tokens: int,
) -> list[Marker]:
    """Markers for ``cur`` given its predecessor and their relation."""
    shared = relation.shared_segments if prev is not None else 0
    segments = cur.segments
    new = [(i, segments[i]) for i in range(shared, len(segments))]  # only these are scanned
    if prev is not None and shared < len(prev.segments):  # rewritten history: keep what prev never had
        seen = set(prev.hashes)
        new = [(i, s) for i, s in new if s.hash not in seen]
    markers: list[Marker] = []
    compaction = _compaction(prev, cur, relation, prev_tokens, cur_tokens, new)
    if compaction:
        markers.append(compaction)
    markers.extend(_reminders(new))
    tools = _tools_executed(cur, new, prev)
    if tools:
        markers.append(tools)
    return markers


def _reminders(new: list[tuple[int, Segment]]) -> list[Marker]:
    out = []
    for index, seg in new:
        if seg.kind == "reminder" or (seg.kind in ("user_text", "tool_result") and "<system-reminder>" in seg.text):
            for text in split_reminders(seg.text)[0]:
                body = text[len("<system-reminder>") : -len("</system-reminder>")].strip()
                detail = {
                    "segment": index,
                    "embedded": seg.kind != "reminder",
                    "chars": len(body),
                    "preview": body[:_PREVIEW],
                }
                out.append(Marker(MarkerKind.REMINDER, seg.pointer, detail))
    return out


def _tools_executed(
    cur: CanonicalPrompt, new: list[tuple[int, Segment]], prev: CanonicalPrompt | None
) -> Marker | None:
    names = cur.tool_refs.names  # kept up to date from the predecessor's: no pass over all segments
    done = prev.tool_refs.results if prev is not None else frozenset()
    tools = [
        {"ref": seg.ref, "name": names.get(seg.ref) if seg.ref is not None else None, "pointer": seg.pointer}
        for _, seg in new
        if seg.kind == "tool_result" and (seg.ref is None or seg.ref not in done)
    ]
    if not tools:
        return None
    return Marker(MarkerKind.TOOLS_EXECUTED, tools[0]["pointer"], {"count": len(tools), "tools": tools})


def is_summary(seg: Segment) -> bool:
    """A compaction's summary: a summary-shaped message, or a Responses ``compaction`` item."""
    return _summary_shaped(seg) or (seg.kind == "other" and '"type":"compaction' in seg.text)


def _summary_shaped(seg: Segment) -> bool:
    return seg.kind in ("user_text", "assistant_text", "system", "other") and bool(_SUMMARY_RE.search(seg.text[:2000]))


def _compaction(
    prev: CanonicalPrompt | None,
    cur: CanonicalPrompt,
    relation: Relation,
    prev_tokens: int | None,
    cur_tokens: int,
    new: list[tuple[int, Segment]],
) -> Marker | None:
    for index, seg in new:
        if seg.kind == "other" and '"type":"compaction' in seg.text:  # Responses compaction item
            return Marker(MarkerKind.COMPACTION, seg.pointer, {"evidence": "compaction_item", "segment": index})
    if prev is None or relation.kind not in (RelationKind.DIVERGED, RelationKind.EPOCH_START) or not prev_tokens:
        return None
    start = next((i for i, s in enumerate(cur.segments) if s.kind not in ("tools", "system")), len(cur.segments))
    early = start <= relation.shared_segments <= start + COMPACTION_EARLY_SEGMENTS
    ratio = cur_tokens / prev_tokens
    if ratio > COMPACTION_MAX_RATIO or len(cur.segments) >= len(prev.segments):
        return None
    # A summary after the kept user messages (Codex keeps them, then adds its summary) counts even late.
    late = next((s for _, s in new if _summary_shaped(s)), None)
    if not early and late is None:
        return None
    window = cur.segments[start : start + COMPACTION_EARLY_SEGMENTS + 1] if early else ()
    summary = next((s for s in window if _summary_shaped(s)), None) or late
    pointer = summary.pointer if summary else relation.pointer
    detail = {
        "evidence": "summary_message" if summary else "early_shrink",
        "prev_tokens": prev_tokens,
        "cur_tokens": cur_tokens,
        "ratio": round(ratio, 3),
        "prev_segments": len(prev.segments),
        "cur_segments": len(cur.segments),
    }
    return Marker(MarkerKind.COMPACTION, pointer, detail)
