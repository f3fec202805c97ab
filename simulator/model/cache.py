"""The prompt-cache model: Anthropic breakpoints and OpenAI automatic prefix caching.

Pure core: every call takes `now` (seconds) so tests drive TTLs with a fake clock.

Anthropic: a block carrying `cache_control` is a breakpoint; the cache entry is the hash of the
whole prefix up to and including it (scoped by API-key fingerprint and model). For each
breakpoint the lookup checks that position and up to 20 blocks before it; the furthest live entry
found is a read (and its TTL restarts). Breakpoints after the read point are written, the tokens
of each new segment attributed to that breakpoint's TTL (5m or 1h). A prefix shorter than the
model's minimum is silently not cached. Usage is additive: input = tokens after the last
read/write point, so input + cache_read + cache_creation = the whole prompt.

OpenAI: every prompt of at least 1024 tokens is cached automatically at 1024 + 128·k token
boundaries; a later prompt sharing the prefix reads the longest live boundary. The cache is per
API key and per ``prompt_cache_key`` (a request is routed by it: another key is another machine).
An entry lives 5 minutes of inactivity, or what ``prompt_cache_options.ttl`` (30m, 12h) or
``prompt_cache_retention: 24h`` asks. A block marked ``prompt_cache_breakpoint`` is also an exact
boundary (not rounded), with its own TTL; ``prompt_cache_options.mode: explicit`` drops the
automatic boundaries. Usage is inclusive: cached_tokens is part of prompt_tokens / input_tokens.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from ctxscope.simulator.model.prompt import Block, OpenAICaching, openai_ttl
from ctxscope.vocab.tokens import encoding

# Minimum cacheable prefix per model name fragment, first match wins. Sources: LiteLLM's prompt
# caching table (512 Opus 5; 4096 Haiku 4.5, Opus 4.5/4.6) and orq.ai (2048 Sonnet 4.6, Haiku 3.x).
MIN_CACHEABLE: tuple[tuple[str, int], ...] = (
    ("opus-5", 512),
    ("haiku-4-5", 4096),
    ("opus-4-5", 4096),
    ("opus-4-6", 4096),
    ("sonnet-4-6", 2048),
    ("3-5-haiku", 2048),
    ("3-haiku", 2048),
)
DEFAULT_MIN_CACHEABLE = 1024
LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}

OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128


def min_cacheable(model: str) -> int:
    name = model.lower()
    for fragment, minimum in MIN_CACHEABLE:
        if fragment in name:
            return minimum
    return DEFAULT_MIN_CACHEABLE


@dataclass(frozen=True)
class PromptUsage:
    """Prompt tokens split by cache outcome (provider-neutral)."""

    total: int
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @property
    def uncached(self) -> int:
        return self.total - self.cache_read - self.cache_write


@functools.lru_cache(maxsize=2048)
def _token_bytes(text: str) -> bytes:
    return array("I", encoding().encode_ordinary(text)).tobytes() if text else b""


class PromptCache:
    """Live cache entries: prefix hash -> (expiry, ttl seconds)."""

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[float, float]] = {}
        # Model name fragment -> minimum, looked up before the table: a test or bench plays a provider
        # whose minimum differs from the published one (a real one cached 1,365 tokens where it says 2,048).
        self.minimums: dict[str, int] = {}

    def minimum(self, model: str) -> int:
        name = model.lower()
        return next((m for fragment, m in self.minimums.items() if fragment in name), None) or min_cacheable(model)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _alive(self, key: bytes, now: float) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return False
        if entry[0] <= now:
            del self._entries[key]
            return False
        return True

    def _store(self, key: bytes, now: float, ttl: float) -> None:
        old = self._entries.get(key)
        self._entries[key] = (now + max(ttl, old[1] if old else 0.0), max(ttl, old[1] if old else 0.0))
        if len(self._entries) > 50_000:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}

    def anthropic(self, scope: str, model: str, blocks: Iterable[Block], now: float) -> PromptUsage:
        blocks = list(blocks)
        minimum = self.minimum(model)
        running = hashlib.sha256(f"anthropic\x00{scope}\x00{model}".encode()).digest()
        hashes: list[bytes] = []
        cumulative: list[int] = []
        total = 0
        for block in blocks:
            running = hashlib.sha256(running + block.key).digest()
            hashes.append(running)
            total += block.tokens
            cumulative.append(total)
        points = [i for i, b in enumerate(blocks) if b.ttl and cumulative[i] >= minimum]
        read_end, read_ttl = -1, "5m"
        for p in points:
            for q in range(p, max(-1, p - LOOKBACK_BLOCKS - 1), -1):
                if self._alive(hashes[q], now):
                    if q > read_end:
                        read_end, read_ttl = q, blocks[p].ttl or "5m"
                    break
        if read_end >= 0:  # a read restarts the entry's TTL (a 1h breakpoint upgrades it)
            self._store(hashes[read_end], now, TTL_SECONDS[read_ttl])
        write = {"5m": 0, "1h": 0}
        boundary = cumulative[read_end] if read_end >= 0 else 0
        for p in points:
            if p <= read_end:
                continue
            ttl = blocks[p].ttl or "5m"
            write[ttl] += cumulative[p] - boundary
            boundary = cumulative[p]
            self._store(hashes[p], now, TTL_SECONDS[ttl])
        read = cumulative[read_end] if read_end >= 0 else 0
        return PromptUsage(total, read, write["5m"], write["1h"])

    def openai(
        self, scope: str, model: str, blocks: Iterable[Block], now: float, policy: OpenAICaching | None = None
    ) -> PromptUsage:
        policy = policy or OpenAICaching()
        hasher = hashlib.sha256(f"openai\x00{scope}\x00{policy.route}\x00{model}".encode())
        boundaries: list[tuple[int, bytes, float]] = []
        count, next_boundary = 0, OPENAI_MIN_TOKENS
        for block in blocks:
            hasher.update(b"\x01" + block.meta.encode() + b"\x02")
            data = _token_bytes(block.text)
            n_tokens = len(data) // 4 + block.extra_tokens
            offset = 0  # tokens of this block already hashed
            while count + (n_tokens - offset) >= next_boundary:
                take = next_boundary - count
                hasher.update(data[offset * 4 : (offset + take) * 4])
                offset += take
                count = next_boundary
                if not policy.explicit_only:
                    boundaries.append((count, hasher.copy().digest(), policy.ttl))
                next_boundary += OPENAI_INCREMENT
            hasher.update(data[offset * 4 :])
            count += n_tokens - offset
            if block.ttl and count >= OPENAI_MIN_TOKENS:  # an explicit breakpoint: this exact end
                boundaries.append((count, hasher.copy().digest() + b"!", openai_ttl(block.ttl, policy.ttl)))
        cached = 0
        for length, key, _ in sorted(boundaries, reverse=True):
            if self._alive(key, now):
                cached = length
                break
        for _, key, ttl in boundaries:
            self._store(key, now, ttl)
        return PromptUsage(count, cached)
