"""The small facts the findings need of one call, taken once when the call is stored.

A finding is assembled from these facts alone (``findings.assemble``), so reading a session's
findings reads no body (docs/architecture.md, "Findings"). Pure: a parsed call, its thread's
previous call and the session's cache replay in, a ``CallFacts`` out, kept as compact JSON.
Taking them costs one pass over the call's segments with the texts' digests remembered by segment
hash, so a call costs about its new content. The churn causes are ``churn.py``'s; the cache replay
of a session (``session_replay.py``) steps one call at a time and can be restored from the facts.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass, field, fields

from ctxscope.inspector.advisor.churn import Cause, causes
from ctxscope.inspector.advisor.model import DEFAULT_WINDOW, WINDOWS, SessionCall
from ctxscope.inspector.advisor.session_replay import SessionReplay
from ctxscope.inspector.analyses.canonical_prompt import split_reminders
from ctxscope.inspector.analyses.hashes import common_prefix
from ctxscope.vocab.kinds import CacheVerdict
from ctxscope.vocab.tokens import count_tokens

FACTS_VERSION = 2
OVERSIZED_TOKENS = 10_000  # a tool result this long is oversized ...
OVERSIZED_SHARE = 0.05  # ... and so is one above this share of the window, whichever is lower
# Tool results kept as facts: any that may be oversized under the smallest window we know.
BIG_FLOOR = min(OVERSIZED_TOKENS, int(OVERSIZED_SHARE * min(DEFAULT_WINDOW, *WINDOWS.values())))
DUPLICATE_TOKENS = 500
_REMEMBERED = 16_384  # segment digests and duplicate counts kept (LRU)
_REMEMBERED_CHARS = 32 << 20  # and the long texts kept with them, at most (16,384 of 100 KB were 1.6 GB)
_SCANS = 128  # calls whose scan is kept (the last of each recent thread)


@dataclass(frozen=True)
class CallFacts:
    """What the findings need of one call; ``skip``: no prompt we could read (only counted)."""

    id: str
    session: str
    thread: str  # the call's thread, or its own id
    at: float  # started_at, unix seconds
    skip: bool = False
    model: str | None = None
    family: str = "unknown"
    prev: str | None = None  # the thread's previous call these facts compare with
    total: int = 0  # o200k tokens of the prompt
    size: int = 0  # reported input tokens, else ``total``
    compacted: bool = False
    tools: list[list] | None = None  # [name, pointer, tokens] per declared tool; None: no tools at all
    called: list[str] = field(default_factory=list)  # tools called in the prompt or the response
    big: list[list] = field(default_factory=list)  # [hash, pointer, tokens, tool call id] large tool results
    dups: list[list] = field(default_factory=list)  # [digest, tokens, pointers] texts repeated in the prompt
    churn: list[Cause] = field(default_factory=list)
    writes: list[list] = field(default_factory=list)  # [pointer, tokens, ttl, key] cache entries written
    read: list | None = None  # [writer call, its pointer, key, ttl seconds] the cache entry read
    # Read from the call's own row, never stored with the facts: the upstream (the simulator's calls
    # are never priced) and the one loss figure the analysis stored (``analyses/cache/loss.py``) when
    # its verdict is a client break (a loss to an expired TTL or the provider is no churn).
    provider: str | None = None
    lost_tokens: int | None = None
    lost_usd: float | None = None

    def to_json(self) -> str:
        data = {
            k: v
            for k, v in ((f.name, getattr(self, f.name)) for f in fields(self))
            if k not in _FROM_ROW
            and (k in _KEPT or (k == "tools" and v is not None) or v not in (None, [], False, 0, "unknown"))
        }
        if self.churn:
            data["churn"] = [vars(c) for c in self.churn]
        return json.dumps({"v": FACTS_VERSION, **data}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> CallFacts | None:
        """The stored facts, None for another version or a damaged row (the session is then taken again)."""
        try:
            data = json.loads(text)
            if data.pop("v", None) != FACTS_VERSION:
                return None
            data["churn"] = [Cause(**c) for c in data.get("churn", ())]
            return CallFacts(**data)
        except (ValueError, TypeError):
            return None


_KEPT = ("id", "session", "thread", "at")
_FROM_ROW = ("provider", "lost_tokens", "lost_usd")


def break_loss(verdict: str | None, tokens: int | None, usd: float | None) -> dict:
    """The stored loss as churn counts it: a client break's, 0 for any other verdict, None unanalysed."""
    if verdict is None:
        return {"lost_tokens": None, "lost_usd": None}
    if verdict != CacheVerdict.CLIENT_BREAK:
        return {"lost_tokens": 0, "lost_usd": None}
    return {"lost_tokens": tokens or 0, "lost_usd": usd}


def skipped(call_id: str, session: str, thread: str | None, at: float) -> CallFacts:
    return CallFacts(call_id, session, thread or call_id, at, skip=True)


@dataclass
class _Scan:
    """What a pass over a prompt's segments found, by segment index, so the next call of the thread
    scans only the segments after the prefix it shares with this one (and copies the rest)."""

    n: int = 0
    tool_segments: list[int] = field(default_factory=list)  # every tool definition's index
    tools: list[tuple[int, str, int]] = field(default_factory=list)  # (index, name, tokens)
    called: dict[str, int] = field(default_factory=dict)  # tool called -> its first index
    big: list[tuple[int, str, int, str | None]] = field(default_factory=list)  # (index, hash, tokens, ref)
    texts: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # digest -> (text, indices)
    dupes: dict[str, None] = field(default_factory=dict)  # the digests held twice or more

    def upto(self, k: int) -> _Scan:
        """The part of this scan before segment ``k`` (a copy: this one stays as it is)."""
        if k >= self.n:  # the whole prompt is shared: the usual case, copied in C
            return _Scan(
                self.n,
                self.tool_segments[:],
                self.tools[:],
                dict(self.called),
                self.big[:],
                dict(self.texts),
                dict(self.dupes),
            )

        def cut(entries: list) -> list:
            return entries[: bisect_left(entries, k, key=_index)]

        texts = {}
        for digest, (text, where) in self.texts.items():
            kept = tuple(i for i in where if i < k)
            if kept:
                texts[digest] = (text, kept)
        return _Scan(
            k,
            cut(self.tool_segments),
            cut(self.tools),
            {name: i for name, i in self.called.items() if i < k},
            cut(self.big),
            texts,
            {d: None for d, (_, where) in texts.items() if len(where) > 1},
        )


def _index(entry: int | tuple) -> int:
    return entry if isinstance(entry, int) else entry[0]


class FactsTaker:
    """Takes each call's facts; remembers the last scans of recent calls (to scan only what a call
    adds to its thread's previous prompt), texts' digests by segment hash and their counts (bounded)."""

    def __init__(self) -> None:
        self._texts: OrderedDict[str, tuple[tuple[str, str], ...]] = OrderedDict()  # segment hash -> long texts
        self._text_chars = 0  # the characters of the texts ``_texts`` holds
        self._counts: OrderedDict[str, int] = OrderedDict()  # text digest -> tokens
        self._scans: OrderedDict[str, _Scan] = OrderedDict()  # call id -> its scan

    def take(self, session: str, call: SessionCall, prev: SessionCall | None, replay: SessionReplay) -> CallFacts:
        segments = call.prompt.segments
        shared = common_prefix(prev.prompt.hashes, call.prompt.hashes) if prev is not None else 0
        base = self._scans.get(prev.id) if prev is not None else None
        scan = self._scan(call, base.upto(min(shared, base.n)) if base is not None else _Scan())
        self._scans[call.id] = scan
        while len(self._scans) > _SCANS:
            self._scans.popitem(last=False)
        tools: list[list] | None = None
        if scan.tool_segments:
            tools, names = [], set()
            for i, name, tokens in scan.tools:
                if name not in names:
                    names.add(name)
                    tools.append([name, segments[i].pointer, tokens])
        dups = []
        for digest in sorted(scan.dupes, key=lambda d: scan.texts[d][1][0]):  # in order of first appearance
            text, where = scan.texts[digest]
            if (tokens := self._count(digest, text)) >= DUPLICATE_TOKENS:
                dups.append([digest, tokens, [segments[i].pointer for i in where]])
        writes, read = replay.step(call) if call.family == "anthropic" else ([], None)
        reported = (call.usage or {}).get("input")
        return CallFacts(
            call.id,
            session,
            call.thread or call.id,
            call.started_at,
            model=call.model,
            family=call.family,
            prev=prev.id if prev is not None else None,
            total=call.tokens.total,
            size=reported if isinstance(reported, int) and reported > 0 else call.tokens.total,
            compacted=call.compacted,
            provider=call.provider,
            **break_loss(call.verdict, call.lost_tokens, call.lost_usd),
            tools=tools,
            called=sorted(scan.called.keys() | response_tools(call.response)),
            big=[[h, segments[i].pointer, tokens, ref] for i, h, tokens, ref in scan.big],
            dups=dups,
            churn=causes(prev, call, shared) if prev is not None else [],
            writes=writes,
            read=read,
        )

    def _scan(self, call: SessionCall, scan: _Scan) -> _Scan:
        """``scan`` (of the segments before ``scan.n``) completed with the call's other segments."""
        segments, per = call.prompt.segments, call.tokens.per_segment
        for i in range(scan.n, len(segments)):
            seg = segments[i]
            kind = seg.kind
            if kind == "tools":
                scan.tool_segments.append(i)
                if seg.name:
                    scan.tools.append((i, seg.name, per[i]))
            elif kind == "tool_call" and seg.name:
                scan.called.setdefault(seg.name, i)
            elif kind == "tool_result" and per[i] >= BIG_FLOOR:
                scan.big.append((i, seg.hash[:32], per[i], seg.ref))
            if len(seg.text) >= DUPLICATE_TOKENS:  # a shorter text cannot hold 500 tokens
                for digest, text in self._long_texts(seg.hash, seg.text):
                    found = scan.texts.get(digest)
                    scan.texts[digest] = (text, (*found[1], i)) if found is not None else (text, (i,))
                    if found is not None:
                        scan.dupes[digest] = None
        scan.n = len(segments)
        return scan

    def _long_texts(self, seg_hash: str, text: str) -> tuple[tuple[str, str], ...]:
        found = self._texts.get(seg_hash)
        if found is None:
            reminders, _ = split_reminders(text)
            # a whole segment, or a reminder block inside one
            found = tuple((_digest(t), t) for t in {text, *reminders} if len(t) >= DUPLICATE_TOKENS)
            self._texts[seg_hash] = found
            self._text_chars += sum(len(t) for _, t in found)
            while len(self._texts) > _REMEMBERED or self._text_chars > _REMEMBERED_CHARS:
                _, old = self._texts.popitem(last=False)
                self._text_chars -= sum(len(t) for _, t in old)
        else:
            self._texts.move_to_end(seg_hash)
        return found

    def _count(self, digest: str, text: str) -> int:
        found = self._counts.get(digest)
        if found is None:
            found = self._counts[digest] = count_tokens(text)
            if len(self._counts) > _REMEMBERED:
                self._counts.popitem(last=False)
        return found


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def response_tools(response: object) -> set[str]:
    """The tools the model called in its answer (any provider's shape)."""
    names: set[str] = set()
    if not isinstance(response, dict):
        return names
    items = [*(response.get("content") or []), *(response.get("output") or [])]
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            items += message.get("tool_calls") or []
    for item in items:
        if not isinstance(item, dict):
            continue
        fn: dict = item["function"] if isinstance(item.get("function"), dict) else {}
        if item.get("type") in ("tool_use", "function_call", "function", "server_tool_use"):
            name = item.get("name") or fn.get("name")
            if isinstance(name, str) and name:
                names.add(name)
    return names
