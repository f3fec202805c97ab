"""The conservative test for "this answer evidently uses that source": a long verbatim run of its words.

An answer uses a source evidently when it contains a run of at least ``MIN_WORDS`` (12)
consecutive words and ``MIN_CHARS`` (60) characters that also appears, in the same order, in the
text the model was shown of that source. Words are compared case-folded, with punctuation and
whitespace ignored (``\\w+`` tokens), so re-wrapped or re-punctuated quotes still count, while
paraphrase, shared vocabulary and short common phrases never do. A run that is also in the user's
own input for the turn does not count (the user said it first).

Cost is what keeps the test on by default: each source is indexed once, when its tool result
arrives, by winnowed fingerprints of 5-word shingles (window 8, so every shared run of 12 words
is guaranteed to share a fingerprint); checking an answer costs one dictionary lookup per answer
shingle plus a character comparison to confirm each hit, independent of how many sources the
session has. Memory is bounded (``max_chars`` of indexed text per session, oldest dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

MIN_WORDS = 12
MIN_CHARS = 60
SHINGLE = 5
WINDOW = MIN_WORDS - SHINGLE + 1  # guarantees a shared fingerprint in every shared run of MIN_WORDS words
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Normalised:
    text: str  # words joined by single spaces, case-folded
    starts: tuple[int, ...]  # where each word starts in ``text``


def normalise(text: str) -> Normalised:
    words = _WORD.findall(text.casefold())
    starts = list(accumulate((len(w) + 1 for w in words), initial=0))
    starts.pop()
    return Normalised(" ".join(words), tuple(starts))


def _shingles(n: Normalised) -> list[int]:
    t, s, k = n.text, n.starts, SHINGLE
    ends = [x - 1 for x in s[k:]] + [len(t)]
    return [hash(t[a:b]) for a, b in zip(s, ends, strict=False)]


def _winnow(hashes: list[int]) -> list[int]:
    """Positions of the fingerprints: the rightmost minimum of every window of WINDOW hashes (linear time)."""
    n, w = len(hashes), WINDOW
    if n == 0:
        return []
    if n <= w:
        m = min(hashes)
        return [n - 1 - hashes[::-1].index(m)]
    picked: list[int] = []
    m = -1
    for end in range(w - 1, n):
        start = end - w + 1
        if m < start:  # the minimum left the window: find the rightmost minimum of the new window
            m = start
            for j in range(start + 1, end + 1):
                if hashes[j] <= hashes[m]:
                    m = j
        elif hashes[end] <= hashes[m]:
            m = end
        if not picked or picked[-1] != m:
            picked.append(m)
    return picked


@dataclass(frozen=True)
class QuoteHit:
    source_id: str
    words: int
    chars: int
    excerpt: str  # the shared run, normalised (for logs and tests)


@dataclass
class _Doc:
    source_id: str
    text: Normalised
    fingerprints: int


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class QuoteIndex:
    """Fingerprints of the sources of one session."""

    def __init__(self, max_chars: int = 8 * 1024 * 1024) -> None:
        self.max_chars = max_chars
        self._docs: dict[int, _Doc] = {}
        self._index: dict[int, int] = {}  # fingerprint -> doc number << 32 | char offset (ints: no GC tracking)
        self._next = 0
        self._chars = 0
        self._live = 0  # fingerprints of docs still held

    def add(self, source_id: str, text: str) -> None:
        n = normalise(text)
        if len(n.starts) < SHINGLE:
            return
        doc_no = self._next
        self._next += 1
        hashes = _shingles(n)
        picked = _winnow(hashes)
        for j in picked:
            self._index[hashes[j]] = doc_no << 32 | n.starts[j]
        self._docs[doc_no] = _Doc(source_id, n, len(picked))
        self._chars += len(n.text)
        self._live += len(picked)
        self._evict()

    def _evict(self) -> None:
        while self._chars > self.max_chars and len(self._docs) > 1:
            old = self._docs.pop(min(self._docs))
            self._chars -= len(old.text.text)
            self._live -= old.fingerprints
        if len(self._index) > 2 * self._live + 1024:  # drop fingerprints of evicted docs
            self._index = {h: v for h, v in self._index.items() if v >> 32 in self._docs}

    def __len__(self) -> int:
        return len(self._docs)

    def find(self, answer: str, *, exclude: str = "") -> list[QuoteHit]:
        """The longest shared run per source, for runs of at least MIN_WORDS words and MIN_CHARS characters."""
        a = normalise(answer)
        if len(a.starts) < MIN_WORDS or not self._index:
            return []
        skip = normalise(exclude).text if exclude else ""
        best: dict[str, QuoteHit] = {}
        covered_to = -1  # answer offset up to which a confirmed run already reaches
        for i, h in enumerate(_shingles(a)):
            start = a.starts[i]
            hit = self._index.get(h)
            if hit is None or start < covered_to:
                continue
            doc = self._docs.get(hit >> 32)
            if doc is None:
                continue
            run = _confirm(a.text, start, doc.text.text, hit & 0xFFFFFFFF)
            if run is None:
                continue
            lo, hi = run
            span = a.text[lo:hi]
            if skip and span in skip:
                continue
            words = span.count(" ") + 1
            covered_to = hi
            old = best.get(doc.source_id)
            if old is None or words > old.words:
                best[doc.source_id] = QuoteHit(doc.source_id, words, len(span), span[:200])
        return sorted(best.values(), key=lambda q: -q.words)


def _confirm(a: str, ai: int, t: str, ti: int) -> tuple[int, int] | None:
    """The whole-word run of ``a`` around ``ai`` that equals ``t`` around ``ti``, if long enough."""
    right = _common_prefix(a[ai:], t[ti : ti + len(a) - ai])
    left = _common_prefix(a[:ai][::-1], t[max(0, ti - ai) : ti][::-1])
    lo, hi, tlo, thi = ai - left, ai + right, ti - left, ti + right
    # trim to whole words on both sides (a run may stop inside a word of either text)
    while lo < hi and ((lo > 0 and a[lo - 1] != " ") or (tlo > 0 and t[tlo - 1] != " ")):
        lo, tlo = lo + 1, tlo + 1
    while hi > lo and ((hi < len(a) and a[hi] != " ") or (thi < len(t) and t[thi] != " ")):
        hi, thi = hi - 1, thi - 1
    span = a[lo:hi].strip()
    if len(span) < MIN_CHARS or span.count(" ") + 1 < MIN_WORDS:
        return None
    return lo, hi
