"""What the analyzer remembers of recent calls: slim canonical prompts per session and API key.

A new call's predecessor is chosen among recent calls of its session and key (I1), so the
analyzer keeps, per (session, key fingerprint), the last few calls of each recently active thread.
Prompts are kept *slim*: segments without their text (hashes, pointers, kinds, markers and token
counts are all that relations, cache prediction and markers need of a predecessor), and segments
unchanged since the thread's previous call share one object, so a long session costs about one
small record per distinct segment. Bounded by threads per scope, scopes and total segments (LRU).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from ctxscope.inspector.accounting import TokenBreakdown
from ctxscope.inspector.canonical import CanonicalPrompt, Segment
from ctxscope.inspector.threads import RecentCall

Scope = tuple[str, str | None]  # (session, key fingerprint)
_order = itertools.count()


@dataclass(frozen=True)
class Remembered:
    """A stored call as a candidate predecessor."""

    call_id: str
    session: str
    thread: str
    prompt: CanonicalPrompt  # slim: segment texts dropped
    tokens: TokenBreakdown
    time: float  # unix seconds the cache clock uses for this call
    capture_epoch: int
    provider: str
    api: str | None
    order: int = 0

    @property
    def recent(self) -> RecentCall:
        return RecentCall(self.call_id, self.prompt, self.session, self.thread)


def slim(prompt: CanonicalPrompt, base: CanonicalPrompt | None = None) -> CanonicalPrompt:
    """``prompt`` without segment texts, sharing unchanged segment objects with ``base``."""
    old = base.segments if base is not None else ()
    segments = []
    for i, s in enumerate(prompt.segments):
        o = old[i] if i < len(old) else None
        if o is not None and o.hash == s.hash and o.pointer == s.pointer and o.breakpoint == s.breakpoint:
            segments.append(o)
        else:
            segments.append(Segment(s.pointer, s.kind, s.role, "", s.hash, s.breakpoint, s.name, s.ref, s.images))
    return CanonicalPrompt(
        prompt.api, prompt.model, tuple(segments), prompt.cache_policy, prompt.params, prompt.previous_response_id
    )


class RecentMemory:
    """Recent calls per scope: the last ``per_thread`` calls of up to ``threads`` threads each."""

    def __init__(self, per_thread: int = 2, threads: int = 16, max_scopes: int = 512, max_segments: int = 2_000_000):
        self.per_thread, self.threads, self.max_scopes, self.max_segments = per_thread, threads, max_scopes, max_segments
        self._scopes: OrderedDict[Scope, OrderedDict[str, list[Remembered]]] = OrderedDict()
        self._segments = 0

    def __contains__(self, scope: Scope) -> bool:
        return scope in self._scopes

    @property
    def segments(self) -> int:
        return self._segments

    def open(self, scope: Scope) -> None:
        """Mark a scope as known (possibly empty), so it is not loaded from the store again."""
        if scope not in self._scopes:
            self._scopes[scope] = OrderedDict()
        self._scopes.move_to_end(scope)
        self._evict(keep=scope)

    def calls(self, scope: Scope) -> list[Remembered] | None:
        """The scope's remembered calls, oldest first; None when the scope was never opened."""
        threads = self._scopes.get(scope)
        if threads is None:
            return None
        self._scopes.move_to_end(scope)
        return sorted((r for calls in threads.values() for r in calls), key=lambda r: r.order)

    def latest(self, scope: Scope, thread: str) -> Remembered | None:
        calls = self._scopes.get(scope, {}).get(thread)
        return calls[-1] if calls else None

    def add(self, scope: Scope, call: Remembered) -> Remembered:
        """Remember ``call`` (its prompt slimmed against its thread's latest call)."""
        self.open(scope)
        threads = self._scopes[scope]
        calls = threads.setdefault(call.thread, [])
        threads.move_to_end(call.thread)
        base = calls[-1].prompt if calls else None
        call = Remembered(call.call_id, call.session, call.thread, slim(call.prompt, base), call.tokens, call.time,
                          call.capture_epoch, call.provider, call.api, next(_order))  # fmt: skip
        calls.append(call)
        self._segments += len(call.prompt.segments)
        while len(calls) > self.per_thread:
            self._segments -= len(calls.pop(0).prompt.segments)
        while len(threads) > self.threads:
            _, old = threads.popitem(last=False)
            self._segments -= sum(len(r.prompt.segments) for r in old)
        self._evict(keep=scope)
        return call

    def _evict(self, keep: Scope) -> None:
        while len(self._scopes) > 1 and (len(self._scopes) > self.max_scopes or self._segments > self.max_segments):
            scope = next(iter(self._scopes))
            if scope == keep:
                self._scopes.move_to_end(scope)
                scope = next(iter(self._scopes))
            old = self._scopes.pop(scope)
            self._segments -= sum(len(r.prompt.segments) for calls in old.values() for r in calls)

    def clear(self) -> None:
        self._scopes.clear()
        self._segments = 0
