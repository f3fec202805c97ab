"""Declared effects placed where they took effect, and merged with the inferred markers of the same meaning.

Our agent declares each effect in an ``x-ctxscope-event`` header (analysis_input.parse_event) but
does not say where in the request it lies. Here each declared marker gets the pointer of the
content it added or replaced, found among the segments that are new in this call: the receipt
of an externalised output (it names the artifact), the archive receipts, the summary message of
a checkpoint, the reminder block (``span``: where the block lies in that text), the guard's
steering message, the empty-answer follow-up. Clicking the marker in the UI then shows exactly
that text. The rules follow how the agent builds a request: tool results, then steering messages
(the guard's reminder), then the turn's input (its round ``<system-reminder>`` block embedded in
front of the user's words), then appended cadence reminders, then a request-only deadline last.

A declared and an inferred marker of the same meaning on one call (the reminder block the
inspector saw for itself, the compaction it inferred from the shrunken history) become one: the
declared marker, with ``inferred: true`` and the inferred details it lacks. A generic ``steer`` or
``retry`` declared together with the guard reminder or the empty-answer retry it carried is folded
into that marker (``steer: true`` / ``retry: true``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.analyses.canonical_prompt import REMINDER_RE, CanonicalPrompt, Segment
from ctxscope.inspector.analyses.markers import Marker
from ctxscope.inspector.analyses.relation import Relation
from ctxscope.vocab.kinds import MarkerKind, RelationKind

# The sections our agent's default reminder providers write, one tag each, by provider name.
PROVIDER_TAGS = {
    "agent-context": "agent_context",
    "todo-status": "todo_completion",
    "session-notices": "session_notices",
}
IN_TURN_PROVIDERS: dict[str, str] = {
    MarkerKind.TODO_REMINDER: "todo_cadence",
    MarkerKind.GUARD_REMINDER: "runaway_guard",
}
REMINDER_KINDS = (MarkerKind.REMINDER, MarkerKind.TODO_REMINDER, MarkerKind.GUARD_REMINDER)
MAX_POINTERS = 64
_OPEN, _CLOSE = "<system-reminder>", "</system-reminder>"


@dataclass
class _Block:
    """One ``<system-reminder>`` block in a new segment."""

    seg: int
    pointer: str
    start: int  # character range in the block text (block_text); -1 when the body was not available
    end: int
    text: str
    standalone: bool  # the segment holds nothing else
    claimed: bool = False


def block_text(body: Any, pointer: str | None) -> str | None:
    """The text a pointer's segment shows: a string, a block's ``text``, a tool result's content."""
    value = resolve(body, pointer)
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    for key in ("text", "content", "output"):
        v = value.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, list):
            parts = [p["text"] for p in v if isinstance(p, dict) and isinstance(p.get("text"), str)]
            if parts:
                return "\n".join(parts)
    return None


def resolve(body: Any, pointer: str | None) -> Any:
    """RFC 6901 lookup; None when the pointer does not lead anywhere."""
    if pointer is None:
        return None
    value = body
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        elif isinstance(value, dict) and token in value:
            value = value[token]
        else:
            return None
    return value


def new_segments(prev: CanonicalPrompt | None, cur: CanonicalPrompt, relation: Relation) -> list[tuple[int, Segment]]:
    """The segments this call added (as markers.infer_markers sees them)."""
    shared = relation.shared_segments if prev is not None else 0
    new = [(i, cur.segments[i]) for i in range(shared, len(cur.segments))]
    if prev is not None and shared < len(prev.segments):
        seen = set(prev.hashes)
        new = [(i, s) for i, s in new if s.hash not in seen]
    return new


def _blocks(new: list[tuple[int, Segment]], body: Any) -> list[_Block]:
    out = []
    for i, seg in new:
        if seg.kind not in ("reminder", "user_text", "tool_result") or _OPEN not in seg.text:
            continue
        text = block_text(body, seg.pointer)
        exact = text is not None and _OPEN in text  # else offsets would not index what the UI shows
        source = text if exact and text is not None else seg.text
        rest = REMINDER_RE.sub("", source).strip()
        for m in REMINDER_RE.finditer(source):
            start, end = (m.start(), m.end()) if exact else (-1, -1)
            out.append(_Block(i, seg.pointer, start, end, m.group(0), seg.kind == "reminder" or not rest))
    return out


def sections(block: str) -> list[str]:
    """The top-level tags a reminder body is made of (``agent-context``, ``todo-status`` ...)."""
    body = block[len(_OPEN) : -len(_CLOSE)] if block.startswith(_OPEN) and block.endswith(_CLOSE) else block
    tags: list[str] = []
    depth_stack: list[str] = []
    for m in re.finditer(r"</?([a-z][a-z0-9_-]{0,40})(?:\s[^<>]*)?(/?)>", body):
        name, closing, selfclose = m.group(1), m.group(0).startswith("</"), m.group(2) == "/"
        if closing:
            if name in depth_stack:
                del depth_stack[depth_stack.index(name) :]
            continue
        if not depth_stack and name not in tags:
            tags.append(name)
        if not selfclose:
            depth_stack.append(name)
    return tags


class _Placer:
    """Finds, among the new segments of one call, the content each declared effect stands for."""

    def __init__(self, prev: CanonicalPrompt | None, cur: CanonicalPrompt, relation: Relation, body: Any):
        self.prev, self.cur, self.relation, self.body = prev, cur, relation, body
        self.new = new_segments(prev, cur, relation)
        self.blocks = _blocks(self.new, body)
        self.used_results: set[int] = set()

    # --- reminder blocks ------------------------------------------------------------------------
    def _claim(self, block: _Block) -> dict:
        block.claimed = True
        out: dict[str, Any] = {"pointer": block.pointer, "chars": len(block.text)}
        if block.start >= 0:
            out["span"] = [block.start, block.end]
        return out

    def last_standalone(self) -> dict | None:
        free = [b for b in self.blocks if not b.claimed and b.standalone]
        return self._claim(free[-1]) if free else None

    def first_standalone(self) -> dict | None:
        free = [b for b in self.blocks if not b.claimed and b.standalone]
        return self._claim(free[0]) if free else None

    def last_block(self) -> dict | None:
        free = [b for b in self.blocks if not b.claimed]
        return self._claim(free[-1]) if free else None

    def round_blocks(self) -> dict | None:
        """Every block embedded in the turn's input (extension reminders and the host's round block)."""
        embedded = [b for b in self.blocks if not b.claimed and not b.standalone]
        if not embedded:
            return self.first_standalone()
        mine = [b for b in embedded if b.seg == embedded[0].seg]
        out = self._claim(mine[0])
        for b in mine[1:]:
            self._claim(b)
        out["chars"] = sum(len(b.text) for b in mine)
        if len(mine) > 1 and all(b.start >= 0 for b in mine):
            out["spans"] = [[b.start, b.end] for b in mine]
        tags = [t for b in mine for t in sections(b.text)]
        out["providers"] = [PROVIDER_TAGS.get(t, t) for t in dict.fromkeys(tags)]
        return out

    # --- other content -------------------------------------------------------------------------------
    def _name(self, seg: Segment) -> str | None:
        return self.cur.tool_refs.names.get(seg.ref) if seg.ref else None

    def receipt(self, tool: Any, artifact: Any) -> dict | None:
        results = [(i, s) for i, s in self.new if s.kind == "tool_result" and i not in self.used_results]
        pick = None
        if isinstance(artifact, str) and artifact not in ("", "none"):
            pick = next(((i, s) for i, s in results if artifact in s.text), None)
        if pick is None:
            pick = next(((i, s) for i, s in results if self._name(s) == tool), None)
        if pick is None:
            return None
        self.used_results.add(pick[0])
        return {"pointer": pick[1].pointer}

    def replaced_results(self) -> dict | None:
        """Tool results whose call already had a result in the predecessor: rewritten in place."""
        if self.prev is None:
            return None
        before = self.prev.tool_refs.results
        ptrs = [s.pointer for _, s in self.new if s.kind == "tool_result" and s.ref in before]
        if not ptrs:
            return {"pointer": self.relation.pointer} if self.relation.pointer else None
        out: dict[str, Any] = {"pointer": ptrs[0], "replaced": len(ptrs)}
        if len(ptrs) > 1:
            out["pointers"] = ptrs[:MAX_POINTERS]
        return out

    def summary(self) -> dict | None:
        """The first new conversation segment: where a replaced history starts (an appended prompt replaced none)."""
        if self.prev is not None and self.relation.kind in (RelationKind.APPEND_ONLY, RelationKind.IDENTICAL):
            return None
        seg = next((s for _, s in self.new if s.kind not in ("tools", "system")), None)
        return {"pointer": seg.pointer} if seg else None

    def last_segment(self) -> dict | None:
        seg = self.cur.segments[-1] if self.cur.segments else None
        return {"pointer": seg.pointer} if seg else None

    def last_result(self) -> dict | None:
        seg = next((s for _, s in reversed(self.new) if s.kind == "tool_result"), None)
        return {"pointer": seg.pointer} if seg else None

    def last_user_text(self) -> dict | None:
        seg = next((s for _, s in reversed(self.new) if s.kind == "user_text" and s.role == "user"), None)
        return {"pointer": seg.pointer} if seg else None

    def first_user_message(self) -> dict | None:
        seg = next((s for _, s in self.new if s.kind in ("user_text", "reminder") and s.role == "user"), None)
        return {"pointer": seg.pointer} if seg else None


# Kinds whose content is found first: request-only and appended reminders lie behind the round block.
_ORDER = (
    "reminder:deadline",
    "todo_reminder",
    "reminder:background_tasks",
    "guard_reminder",
    "reminder",
    "tool_output_externalized",
    "tool_results_archived",
    "compaction",
    "checkpoint",
    "checkpoint_request",
    "guard_signal",
    "empty_answer_retry",
    "retry",
    "steer",
)


def _key(m: Marker) -> str:
    source = m.detail.get("source") if isinstance(m.detail, dict) else None
    if m.kind == MarkerKind.REMINDER and source in ("deadline", "background_tasks"):
        return f"reminder:{source}"
    return m.kind


def _locate(p: _Placer, m: Marker) -> dict | None:
    d, key = m.detail, _key(m)
    if key == MarkerKind.REMINDER_DROPPED:  # admission kept it out: there is no text, only what and why
        return {"scope": "in_turn", "providers": [str(d.get("source", "?"))]}
    if key == "reminder:deadline":
        return _scoped(p.last_block(), "in_turn", ["deadline"])
    if key in (MarkerKind.TODO_REMINDER, "reminder:background_tasks"):
        return _scoped(p.last_standalone(), "in_turn", [IN_TURN_PROVIDERS.get(key, "background_tasks")])
    if key == MarkerKind.GUARD_REMINDER:
        return _scoped(p.first_standalone(), "in_turn", ["runaway_guard"])
    if key == MarkerKind.REMINDER:
        found = p.round_blocks()
        return _scoped(found, "round", None) if found else None
    if key == "tool_output_externalized":
        return p.receipt(d.get("tool"), d.get("artifact"))
    if key == "tool_results_archived" or (key == MarkerKind.COMPACTION and d.get("stage") == "archive"):
        return p.replaced_results()
    if key in (MarkerKind.COMPACTION, MarkerKind.CHECKPOINT):
        return p.summary()
    if key == MarkerKind.CHECKPOINT_REQUEST:
        return p.last_segment()
    if key == "guard_signal":
        return p.last_result()
    if key in (MarkerKind.EMPTY_ANSWER_RETRY, MarkerKind.RETRY):
        return p.last_user_text()
    if key == "steer":
        return p.first_user_message()
    return None


def _scoped(found: dict | None, scope: str, providers: list[str] | None) -> dict | None:
    if found is None:
        return {"scope": scope, **({"providers": providers} if providers else {})}
    found["scope"] = scope
    if providers:
        found["providers"] = providers
    return found


def place_effects(
    inferred: list[Marker],
    declared: list[Marker],
    prev: CanonicalPrompt | None,
    cur: CanonicalPrompt | None,
    relation: Relation,
    body: Any,
) -> list[Marker]:
    """``inferred`` + ``declared`` with pointers found for the declared ones and duplicates merged.

    Inferred reminder markers get their block's ``span`` and ``sections`` too, so any client's
    reminder shows as exactly its block."""
    if cur is None:
        return list(inferred) + list(declared)
    if not declared and not any(m.kind == MarkerKind.REMINDER for m in inferred):
        return list(inferred)
    p = _Placer(prev, cur, relation, body)
    inferred = _with_spans(inferred, p.blocks)
    if not declared:
        return inferred
    placed: list[Marker] = list(declared)
    rank = {k: n for n, k in enumerate(_ORDER)}
    for i in sorted(range(len(declared)), key=lambda i: rank.get(_key(declared[i]), len(_ORDER))):
        m = declared[i]
        found = _locate(p, m) if m.pointer is None else None
        if found:
            pointer = found.pop("pointer", None)
            placed[i] = Marker(m.kind, pointer, {**m.detail, **{k: v for k, v in found.items() if k not in m.detail}})
    return _merge(inferred, _fold(placed))


FOLDS: dict[str, str] = {
    MarkerKind.STEER: MarkerKind.GUARD_REMINDER,
    MarkerKind.RETRY: MarkerKind.EMPTY_ANSWER_RETRY,
}  # generic kind -> the marker it belongs to


def _with_spans(inferred: list[Marker], blocks: list[_Block]) -> list[Marker]:
    """The k-th inferred reminder at a pointer is the k-th block there (markers._reminders' order)."""
    by_pointer: dict[str, list[_Block]] = {}
    for b in blocks:
        by_pointer.setdefault(b.pointer, []).append(b)
    seen: dict[str, int] = {}
    out = []
    for m in inferred:
        if m.kind == MarkerKind.REMINDER and m.pointer in by_pointer:
            k = seen[m.pointer] = seen.get(m.pointer, -1) + 1
            group = by_pointer[m.pointer]
            if k < len(group):
                b = group[k]
                extra: dict[str, Any] = {"span": [b.start, b.end]} if b.start >= 0 else {}
                tags = sections(b.text)
                if tags:
                    extra["sections"] = tags
                m = Marker(m.kind, m.pointer, {**m.detail, **extra})
        out.append(m)
    return out


def _fold(declared: list[Marker]) -> list[Marker]:
    """A bare ``steer`` / ``retry`` beside the specific marker it belongs to becomes a flag on it."""
    kinds = {m.kind for m in declared}
    bare = {m.kind for m in declared if m.kind in FOLDS and set(m.detail) <= {"declared", "scope"}}
    folded = {g for g in bare if FOLDS[g] in kinds}
    out = []
    for m in declared:
        if m.kind in folded and set(m.detail) <= {"declared", "scope"}:
            continue
        flags = {g: True for g in folded if FOLDS[g] == m.kind}
        out.append(Marker(m.kind, m.pointer, {**m.detail, **flags}) if flags else m)
    return out


def _same_meaning(inf: Marker, dec: Marker) -> bool:
    if inf.kind == MarkerKind.REMINDER and dec.kind in REMINDER_KINDS:
        return inf.pointer is not None and inf.pointer == dec.pointer
    if inf.kind == MarkerKind.COMPACTION:
        return dec.kind in (MarkerKind.COMPACTION, MarkerKind.CHECKPOINT_REQUEST)
    return False


def _merge(inferred: list[Marker], declared: list[Marker]) -> list[Marker]:
    kept: list[Marker] = []
    merged: dict[int, dict] = {}
    for inf in inferred:
        target = next((i for i, d in enumerate(declared) if _same_meaning(inf, d)), None)
        if target is None:
            kept.append(inf)
            continue
        extra = merged.setdefault(target, {"inferred": True})
        for k, v in inf.detail.items():
            if k not in declared[target].detail and k not in extra and k != "segment":
                extra[k] = v
    out = [Marker(d.kind, d.pointer, {**d.detail, **merged[i]}) if i in merged else d for i, d in enumerate(declared)]
    return kept + out
