"""Token accounting per segment and per category.

Counts are exact o200k counts of each segment's text (the content only: no role or framing
tokens are added, so a provider's own count is a little higher, and Claude's tokenizer differs
from o200k). Images and documents have no text to count and get a fixed estimate,
``IMAGE_TOKENS`` each (about what Anthropic bills a ~1.15 megapixel image; OpenAI's high-detail
1024x1024 is 765). ``<system-reminder>`` blocks inside a user text or tool result are counted
under "reminder" and the rest of the segment under its own kind; a segment's total is the count
of its whole text, so per-segment totals stay exact.

Counts are cached per segment hash (LRU), so a call that re-sends its history only pays for its
new segments.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt, Segment, split_reminders
from ctxscope.vocab.tokens import count_tokens

IMAGE_TOKENS = 1600
CATEGORIES = (
    "system",
    "tools",
    "user_text",
    "assistant_text",
    "tool_call",
    "tool_result",
    "reminder",
    "image",
    "thinking",
    "other",
)
_SPLIT_KINDS = ("user_text", "tool_result")


@dataclass(frozen=True)
class TokenBreakdown:
    """Token counts of a prompt. The per-segment figures are int arrays (``array("q")``, any
    sequence is converted): the next call's breakdown copies most of them, and copying an array is
    one ``memcpy`` where a tuple touches every int object."""

    total: int
    by_category: dict[str, int]  # every category of CATEGORIES, zeros included
    per_segment: Sequence[int]  # aligned with prompt.segments
    # cumulative[i] = tokens of segments 0..i inclusive; computed here unless a builder that
    # already has most of it (incremental.py, from the previous call) passes it in.
    cumulative: Sequence[int] = field(default=(), kw_only=True, repr=False, compare=False)  # (): compute it

    def __post_init__(self) -> None:
        if not isinstance(self.per_segment, array):
            object.__setattr__(self, "per_segment", array("q", self.per_segment))
        if not self.cumulative:
            object.__setattr__(self, "cumulative", array("q", accumulate(self.per_segment)))
        elif len(self.cumulative) != len(self.per_segment):
            raise ValueError("cumulative does not match per_segment")
        elif not isinstance(self.cumulative, array):
            object.__setattr__(self, "cumulative", array("q", self.cumulative))

    def prefix_tokens(self, n: int) -> int:
        """Tokens of the first ``n`` segments."""
        if n <= 0:
            return sum(self.per_segment[:n])
        return self.cumulative[min(n, len(self.cumulative)) - 1]


# A count costs ~360 bytes to remember and o200k counts ~25 characters a microsecond: a long text's
# count is worth keeping for a long session's whole history (a prompt that diverged is counted
# again from its segments), a short one's only while it comes back call after call (a system
# prompt, a tool). Short texts have their own small LRU, so the one-line prompts of small traffic,
# counted once, do not fill the cache (docs/architecture.md, "Memory").
LONG_TEXT = 256  # characters (~10 us to count)
SHORT_ENTRIES = 2048


@dataclass(frozen=True)
class SegmentCount:
    total: int
    parts: tuple[tuple[str, int], ...]  # (category, tokens), summing to total


class TokenCounter:
    """Counts segments, remembering counts by segment hash (bounded LRU, thread-compatible)."""

    def __init__(self, max_entries: int = 200_000, image_tokens: int = IMAGE_TOKENS):
        self.max_entries = max_entries
        self.image_tokens = image_tokens
        self._cache: OrderedDict[str, SegmentCount] = OrderedDict()  # texts of LONG_TEXT characters or more
        self._short: OrderedDict[str, SegmentCount] = OrderedDict()  # the others, SHORT_ENTRIES at most
        self.hits = 0
        self.misses = 0

    def count_segment(self, seg: Segment) -> SegmentCount:
        cache, limit = (self._cache, self.max_entries) if len(seg.text) >= LONG_TEXT else (self._short, SHORT_ENTRIES)
        cached = cache.get(seg.hash)
        if cached is not None:
            self.hits += 1
            cache.move_to_end(seg.hash)
            return cached
        self.misses += 1
        result = cache[seg.hash] = self._count(seg)
        if len(cache) > limit:
            cache.popitem(last=False)
        return result

    def clear(self) -> None:
        self._cache.clear()
        self._short.clear()

    def _count(self, seg: Segment) -> SegmentCount:
        text_tokens = count_tokens(seg.text)
        image_tokens = seg.images * self.image_tokens
        parts: list[tuple[str, int]] = []
        own = text_tokens
        if seg.kind in _SPLIT_KINDS and "<system-reminder>" in seg.text:
            reminders, _ = split_reminders(seg.text)
            in_reminders = min(text_tokens, sum(count_tokens(r) for r in reminders))
            parts.append(("reminder", in_reminders))
            own = text_tokens - in_reminders
        kind = seg.kind if seg.kind in CATEGORIES else "other"
        if kind == "image":
            own, image_tokens = 0, image_tokens + own
        parts.insert(0, (kind, own))
        if image_tokens:
            parts.append(("image", image_tokens))
        return SegmentCount(text_tokens + image_tokens, tuple(p for p in parts if p[1] or p[0] == kind))

    def count_prompt(self, prompt: CanonicalPrompt) -> TokenBreakdown:
        by_category = dict.fromkeys(CATEGORIES, 0)
        per_segment = []
        for seg in prompt.segments:
            counted = self.count_segment(seg)
            per_segment.append(counted.total)
            for category, tokens in counted.parts:
                by_category[category] += tokens
        return TokenBreakdown(sum(per_segment), by_category, per_segment)
