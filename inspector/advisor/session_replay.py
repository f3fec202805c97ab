"""The session's Anthropic cache replayed one call at a time, as the writer takes each call's facts.

``replay.py`` holds the rules (breakpoints as sent, TTLs, what a call reads); this replay steps them
one call at a time and notes each call's writes and the earlier write it read, so the findings
need no second pass; after a restart it is restored from the stored facts (``call_facts.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ctxscope.inspector.advisor.model import SessionCall
from ctxscope.inspector.advisor.replay import TTL, Replay, Write, _anthropic, _Entry
from ctxscope.inspector.analyses.cache.memory import anthropic_points
from ctxscope.inspector.analyses.prices import PriceTable

if TYPE_CHECKING:
    from ctxscope.inspector.advisor.call_facts import CallFacts


class _Live(dict):
    """An API key's live cache entries, noting the keys the replay writes and the one it reads (it
    reads an entry by ``live[key]`` once it chose it, looks them up by ``get``), so a call's writes
    and read are found without walking every entry."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.taken: list[bytes] = []
        self.prune_at = _PRUNE_AT

    def __setitem__(self, key: bytes, value: _Entry) -> None:
        self.written.append(key)
        super().__setitem__(key, value)

    def __getitem__(self, key: bytes) -> _Entry:
        self.taken.append(key)
        return super().__getitem__(key)


class SessionReplay:
    """The session's Anthropic cache replayed one call at a time, with the breakpoints as sent
    (``replay.py``'s rules): each call's writes, and the earlier write it read."""

    def __init__(self, prices: PriceTable):
        self.prices = prices
        self.live: dict[str, _Live] = {}  # per API key

    def step(self, call: SessionCall) -> tuple[list[list], list | None]:
        live = self.live.setdefault(call.scope, _Live())
        live.written.clear()
        live.taken.clear()
        _anthropic(call, anthropic_points(call.prompt), live, self.prices.lookup(call.model), Replay())
        get = dict.__getitem__
        writes = [[e.write.pointer, e.write.tokens, e.write.ttl, k.hex()] for k in live.written if (e := get(live, k))]
        read = None
        if live.taken:
            key = live.taken[-1]
            entry = get(live, key)
            read = [entry.write.call_id, entry.write.pointer, key.hex(), entry.ttl]
        _prune(live, call.started_at)
        return writes, read

    def restore(self, facts: Iterable[tuple[CallFacts, str]]) -> None:
        """The replay's state after ``facts`` (with each call's API key fingerprint), in order."""
        for f, scope in facts:
            if f.skip or f.family != "anthropic":
                continue
            live = self.live.setdefault(scope, _Live())
            for pointer, tokens, ttl, key in f.writes:
                seconds = TTL.get(ttl, TTL["5m"])
                live[bytes.fromhex(key)] = _Entry(f.at + seconds, seconds, Write(f.id, pointer, tokens, ttl, 0.0))
            if f.read is not None:
                entry = live.get(bytes.fromhex(f.read[2]))
                if entry is not None:
                    entry.write.read = True
                    entry.ttl = float(f.read[3])
                    entry.expires = f.at + entry.ttl
            _prune(live, f.at)


_PRUNE_AT = 64


def _prune(live: _Live, now: float) -> None:
    """Entries expired well before now can never be read again (calls come in about time order);
    looked for once the entries have doubled since the last time, so a call costs O(1) on average."""
    if len(live) > live.prune_at:
        for key in [k for k, e in live.items() if e.expires < now - TTL["1h"]]:
            del live[key]
        live.prune_at = max(_PRUNE_AT, 2 * len(live))
