"""What the provider has shown of its prompt cache: learned minimums and the entries still alive.

The provider's usage is the ground truth (docs/architecture.md, "Cache verdicts"). Two things the
cache prediction cannot know from one predecessor are kept here, per analyzer:

- ``minimum``: the smallest prefix a model's provider was seen to cache (a reported write or read),
  in o200k estimate tokens, when it is below the built-in table's. It overrides the table, and the
  analyzer persists it in the store, so ``reindex`` and later calls start from it.
- Anthropic cache entries: the prefix (model, message-level parameters, segment hashes) up to every
  breakpoint an earlier call of the same API key wrote, with its expiry. A later call reads the
  furthest live one its own breakpoints reach back to, whichever call wrote it.

Pure: no SQL, no clock (times are the calls' ``started_at``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.hashes import Hashes

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
MESSAGE_INVALIDATORS = ("tool_choice", "thinking", "output_config")  # they change every message entry
MAX_ENTRIES_PER_SCOPE = 4096
MAX_SCOPES = 256  # API keys remembered; the least recently written is forgotten first


@dataclass(frozen=True)
class Learned:
    """A model's observed minimum, as the store keeps it."""

    family: str  # "anthropic" or "openai" (as the store keeps it)
    model: str
    tokens: int  # o200k estimate of the smallest prefix the provider cached
    at: float  # started_at (unix seconds) of the call whose usage showed it: it holds from then on


def family_of(api: str) -> str:
    head = api.split(".", 1)[0]
    return head if head in ("anthropic", "openai") else "unknown"


def reported(usage: object) -> tuple[int, int, int] | None:
    """(input total, cache read, cache write) of a usage dict, None when the input is not reported."""
    if hasattr(usage, "to_dict"):
        usage = usage.to_dict()
    if not isinstance(usage, dict) or not isinstance(usage.get("input"), int):
        return None
    return usage["input"], int(usage.get("cache_read") or 0), int(usage.get("cache_write") or 0)


def anthropic_points(prompt: CanonicalPrompt) -> dict[int, str]:
    """Segment index -> TTL of every cache point, the top-level automatic one included."""
    policy = prompt.cache_policy
    top = policy.get("cache_control")
    points = {b["segment"]: b.get("ttl") or "5m" for b in policy.get("breakpoints", ())}
    if isinstance(top, dict) and prompt.segments:
        points.setdefault(len(prompt.segments) - 1, top.get("ttl") or "5m")
    return points


def prefix_keys(prompt: CanonicalPrompt, indices: Iterable[int]) -> dict[int, bytes]:
    """The identity of the prefix ending at each segment index: what an Anthropic entry is keyed by.

    One running sha256 over the model, the segment digests and (before the first message) the
    message-level parameters; the digests between two wanted indices go in as one slice, so a
    prompt of thousands of segments costs a few C calls, not one per segment.
    """
    wanted = sorted(set(indices))
    if not wanted:
        return {}
    hashes = prompt.hashes
    digests = hashes.digests if isinstance(hashes, Hashes) else bytes.fromhex("".join(hashes))
    width = len(digests) // len(prompt.segments) if prompt.segments else 32
    first_message = next((i for i, seg in enumerate(prompt.segments) if seg.kind not in ("tools", "system")), None)
    params = json.dumps({k: prompt.params.get(k) for k in MESSAGE_INVALIDATORS}, sort_keys=True, default=str)
    running = hashlib.sha256(f"{prompt.model}\x00".encode())
    out: dict[int, bytes] = {}
    done = 0  # segments hashed so far
    for j in wanted:
        end = j + 1
        if first_message is not None and done <= first_message < end:
            running.update(digests[done * width : first_message * width])
            running.update(params.encode())
            done = first_message
        running.update(digests[done * width : end * width])
        done = end
        out[j] = running.copy().digest()
    return out


@dataclass
class _Entry:
    expires: float
    ttl: float


class CacheMemory:
    """Learned minimums and live Anthropic entries for one analyzer (not thread-safe, like it)."""

    def __init__(self, learned: Iterable[Learned] = ()):
        self._minimums: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for x in learned:
            self._minimums.setdefault((x.family, x.model), []).append((x.at, x.tokens))
        self._entries: dict[str, dict[bytes, _Entry]] = {}
        self.unsaved: list[Learned] = []  # learned since the caller last persisted them

    # -- minimums ---------------------------------------------------------------------------
    def minimum(self, family: str, model: str | None, table: int, at: float) -> int:
        """The table's minimum unless the provider was seen caching a shorter prefix of this model
        by a call at or before ``at`` (so ``reindex`` gives every call what live analysis gave it)."""
        seen = [tokens for when, tokens in self._minimums.get((family, model or ""), ()) if when <= at]
        return min(table, *seen) if seen else table

    def learn(self, prompt: CanonicalPrompt, tokens: TokenBreakdown, usage: object, table: int, at: float) -> None:
        """Lower the model's minimum to the prefix its provider just cached, when that is below it.

        Anthropic: read + write is the prefix up to the furthest cache point used. OpenAI: the
        cached tokens. Compared with the table in the provider's units, kept as an o200k estimate
        (the unit the prediction counts in).
        """
        got = reported(usage)
        family = family_of(prompt.api)
        if got is None or family == "unknown" or not prompt.model:
            return
        total, read, write = got
        cached = read + write if family == "anthropic" else read
        if cached <= 0 or total <= 0 or tokens.total <= 0 or cached >= table:
            return  # nothing cached, or no shorter than the table allows (in the provider's own units)
        estimate = max(1, min(tokens.total, int(cached * tokens.total / total)))
        if estimate >= self.minimum(family, prompt.model, table, at):
            return
        self._minimums.setdefault((family, prompt.model), []).append((at, estimate))
        self.unsaved.append(Learned(family, prompt.model, estimate, at))

    # -- Anthropic entries -------------------------------------------------------------------
    def best_entry(self, scope: str, prompt: CanonicalPrompt, points: Mapping[int, str], now: float) -> int | None:
        """The furthest segment index whose prefix an earlier call cached, alive at ``now`` and within
        the lookback of one of this prompt's cache points (the provider's lookup)."""
        live = self._entries.get(scope)
        if not live or not points:
            return None
        candidates = {q for p in points for q in range(max(0, p - LOOKBACK_BLOCKS), p + 1)}
        keys = prefix_keys(prompt, candidates)
        found = [j for j, key in keys.items() if (e := live.get(key)) is not None and e.expires > now]
        return max(found) if found else None

    def record(
        self,
        scope: str,
        prompt: CanonicalPrompt,
        cumulative: Sequence[int],
        minimum: int,
        now: float,
        read_tokens: int,
        usage: object,
    ) -> None:
        """The entry this call read (its TTL restarts) and those it wrote: its cache points past the
        read and at or above the minimum. Nothing when the provider reported that it cached nothing."""
        got = reported(usage)
        points = anthropic_points(prompt)
        if not points or (got is not None and got[1] == 0 and got[2] == 0):
            return
        read_index = None
        if read_tokens > 0:
            i = bisect.bisect_left(cumulative, read_tokens)
            read_index = i if i < len(cumulative) and cumulative[i] == read_tokens else None
        after = read_index if read_index is not None else -1
        written = [p for p in points if p > after and cumulative[p] >= minimum]
        keys = prefix_keys(prompt, [*written, *([read_index] if read_index is not None else [])])
        live = self._entries.pop(scope, {})
        self._entries[scope] = live  # most recently written last
        while len(self._entries) > MAX_SCOPES:
            del self._entries[next(iter(self._entries))]
        for p in written:
            self._store(live, keys[p], now, TTL_SECONDS.get(points[p], 300.0))
        if read_index is not None:
            ttl = max((TTL_SECONDS.get(t, 300.0) for p, t in points.items() if p >= read_index), default=300.0)
            self._store(live, keys[read_index], now, ttl)
        if len(live) > MAX_ENTRIES_PER_SCOPE:
            for key in [k for k, e in live.items() if e.expires <= now]:
                del live[key]
            while len(live) > MAX_ENTRIES_PER_SCOPE:
                del live[min(live, key=lambda k: live[k].expires)]

    @staticmethod
    def _store(live: dict[bytes, _Entry], key: bytes, now: float, ttl: float) -> None:
        old = live.get(key)
        ttl = max(ttl, old.ttl if old else 0.0)
        live[key] = _Entry(now + ttl, ttl)
