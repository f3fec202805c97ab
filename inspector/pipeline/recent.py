"""What the analyzer remembers of recent calls: the last few calls of each recent thread, per scope.

A new call's predecessor is chosen among recent calls of its session and API key: mostly the
latest call of its thread, sometimes an earlier one (a conversation forked, then its first branch
went on). Its prompt is canonicalised by reusing the most similar recent one
(inspector/analyses/incremental.py), which needs the raw body: only a thread's latest call keeps it. Older
calls mostly share their segment objects with the latest. Memory is bounded in (estimated) bytes,
besides threads per scope and scopes (all LRU); an evicted scope is rebuilt from the store when
it returns.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ctxscope.inspector.analyses.accounting import TokenBreakdown
from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.incremental import Prepared
from ctxscope.inspector.analyses.threads import RecentCall

Scope = tuple[str, str | None]  # (session, or the unnamed calls of one client; key fingerprint)
SEGMENT_BYTES = 200  # rough memory of one segment beside the texts it shares with the body
_order = itertools.count()
T = TypeVar("T")


@dataclass(frozen=True)
class Remembered:
    """A stored call as a candidate predecessor."""

    call_id: str
    session: str
    thread: str
    prepared: Prepared
    tokens: TokenBreakdown
    time: float  # unix seconds the cache clock uses for this call
    capture_epoch: int
    provider: str
    api: str | None
    order: int = 0  # when it was remembered
    body: Any = field(default=None, compare=False, repr=False)  # the parsed body, kept as long as the raw one

    @property
    def prompt(self) -> CanonicalPrompt:
        return self.prepared.prompt

    @functools.cached_property
    def recent(self) -> RecentCall:
        """Made once: a call is in the pool of every call placed after it while it is remembered."""
        return RecentCall(self.call_id, self.prompt, self.session, self.thread, self.time)

    @property
    def size(self) -> int:
        # Conservative: an older call's segments are mostly the very objects its successor holds,
        # and a latest call's parsed body mostly the objects of the store's recent bodies.
        return 2 * len(self.prepared.raw or b"") + SEGMENT_BYTES * len(self.prompt.segments)


def _copy(value: T, **changes: Any) -> T:
    """``dataclasses.replace`` for these plain frozen dataclasses (no __post_init__, no slots), at a
    fraction of its cost: three copies per stored call."""
    new = object.__new__(type(value))
    new.__dict__.update(value.__dict__, **changes)
    new.__dict__.pop("recent", None)  # a cached_property of the original: made again from the copy's fields
    return new


class RecentMemory:
    """The last ``per_thread`` calls of up to ``threads`` threads per scope, at most ``max_bytes`` in all."""

    def __init__(self, per_thread: int = 2, threads: int = 16, max_scopes: int = 1024, max_bytes: int = 128 * 2**20):
        self.per_thread, self.threads, self.max_scopes, self.max_bytes = per_thread, threads, max_scopes, max_bytes
        self._scopes: OrderedDict[Scope, OrderedDict[str, list[Remembered]]] = OrderedDict()
        self.bytes = 0

    def __contains__(self, scope: Scope) -> bool:
        return scope in self._scopes

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

    def add(self, scope: Scope, call: Remembered) -> None:
        """Remember ``call`` as its thread's latest (the one before it keeps no raw or parsed body)."""
        self.open(scope)
        threads = self._scopes[scope]
        calls = threads.pop(call.thread, [])
        threads[call.thread] = calls
        if calls and calls[-1].prepared.raw is not None:
            self.bytes -= calls[-1].size
            prepared = _copy(calls[-1].prepared, raw=None)
            calls[-1] = _copy(calls[-1], prepared=prepared, body=None)
            self.bytes += calls[-1].size
        calls.append(_copy(call, order=next(_order)))
        self.bytes += calls[-1].size
        while len(calls) > self.per_thread:
            self.bytes -= calls.pop(0).size
        while len(threads) > self.threads:
            self.bytes -= sum(r.size for r in threads.popitem(last=False)[1])
        self._evict(keep=scope)

    def _evict(self, keep: Scope) -> None:
        while len(self._scopes) > self.max_scopes or self.bytes > self.max_bytes:
            oldest = next(iter(self._scopes))
            if oldest == keep:  # the scope in use: drop its own least recent threads, never its latest
                threads = self._scopes[keep]
                if len(threads) <= 1:
                    return
                self.bytes -= sum(r.size for r in threads.popitem(last=False)[1])
                continue
            self.bytes -= sum(r.size for calls in self._scopes.pop(oldest).values() for r in calls)

    def shrink(self, max_bytes: int) -> None:
        """Forget the least recent scopes until at most ``max_bytes`` are held (a burst is over:
        docs/architecture.md, "Memory"); a scope forgotten is loaded from the store when it returns."""
        while self._scopes and self.bytes > max_bytes:
            self.bytes -= sum(r.size for calls in self._scopes.popitem(last=False)[1].values() for r in calls)

    def clear(self) -> None:
        self._scopes.clear()
        self.bytes = 0
