"""The small facts the findings need of one call, taken once when the call is stored.

A finding is assembled from these facts alone (``findings.assemble``), so reading a session's
findings reads no body (docs/architecture.md, "Findings"). Pure: a parsed call, its thread's
previous call and the session's cache replay in, a ``CallFacts`` out, kept as compact JSON.
Taking them costs one pass over the call's segments with the texts' digests remembered by segment
hash, so a call costs about its new content; the cache replay of a session (``SessionReplay``)
steps one call at a time and can be restored from the stored facts.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from ctxscope.inspector.advisor.model import DEFAULT_WINDOW, WINDOWS, SessionCall
from ctxscope.inspector.advisor.replay import TTL, Replay, Write, _anthropic, _Entry
from ctxscope.inspector.analyses.cache.memory import anthropic_points
from ctxscope.inspector.analyses.canonical_prompt import split_reminders
from ctxscope.inspector.analyses.hashes import common_prefix
from ctxscope.inspector.analyses.prices import PriceTable
from ctxscope.inspector.analyses.prompt_metadata import block_of
from ctxscope.vocab.kinds import CacheVerdict
from ctxscope.vocab.tokens import count_tokens

FACTS_VERSION = 2
OVERSIZED_TOKENS = 10_000  # a tool result this long is oversized ...
OVERSIZED_SHARE = 0.05  # ... and so is one above this share of the window, whichever is lower
# Tool results kept as facts: any that may be oversized under the smallest window we know.
BIG_FLOOR = min(OVERSIZED_TOKENS, int(OVERSIZED_SHARE * min(DEFAULT_WINDOW, *WINDOWS.values())))
DUPLICATE_TOKENS = 500
METADATA = "metadata:"  # a cause in a per-request metadata block: "metadata:<block name>"
EARLY_MESSAGES = 1  # messages/input items counted as "early" for churn
EXCERPT = 24
_REMEMBERED = 16_384  # segment digests and duplicate counts kept (LRU)
_REMEMBERED_CHARS = 32 << 20  # and the long texts kept with them, at most (16,384 of 100 KB were 1.6 GB)
_SCANS = 128  # calls whose scan is kept (the last of each recent thread)


@dataclass(frozen=True)
class Cause:
    """One reason the call's early prefix differs from its predecessor's (a churn finding's unit)."""

    pointer: str
    how: str  # "reordered" (tools in another order), "changed", or METADATA + the block's name
    segment: str  # the segment's kind
    offset: int  # character offset of the first difference
    before: str  # an excerpt of each side around it
    after: str
    lost: int  # tokens from this position on, no longer read from cache


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


def _early(pointer: str, kind: str) -> bool:
    if kind in ("system", "tools"):
        return True
    parts = pointer.split("/")
    in_messages = len(parts) > 2 and parts[1] in ("messages", "input") and parts[2].isdigit()
    return in_messages and int(parts[2]) < EARLY_MESSAGES


def _changed_bytes(a: str, b: str) -> tuple[int, str, str]:
    """Character offset of the first difference and an excerpt of each side around it."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, n - EXCERPT)
    return n, a[start : n + EXCERPT], b[start : n + EXCERPT]


def causes(prev: SessionCall, cur: SessionCall, shared: int | None = None) -> list[Cause]:
    """Why ``cur``'s early prefix differs from ``prev``'s (``shared``: how many leading segments
    they share, if known): the tools (in another order, or changed) and the rest (system, first
    message) each give their own cause, so a call that reorders its tools and changes its system
    prompt counts under both (docs/architecture.md, "Findings")."""
    if prev.model != cur.model or cur.compacted:  # a compaction rewrites early messages on purpose
        return []
    if cur.prompt.server_state or prev.prompt.server_state:  # the prefix is held server-side
        return []
    a, b = prev.prompt.hashes, cur.prompt.hashes
    if (common_prefix(a, b) if shared is None else shared) >= min(len(a), len(b)):
        return []  # one prompt continues the other
    old_segs, new_segs = prev.prompt.segments, cur.prompt.segments
    n_old, n_new = _tools_end(old_segs), _tools_end(new_segs)
    out = []
    tools_a, tools_b = list(a[:n_old]), list(b[:n_new])
    if tools_a != tools_b:  # the first tool that differs
        k = common_prefix(tools_a, tools_b)
        how = "reordered" if sorted(tools_a) == sorted(tools_b) else "changed"
        out.append(_cause(prev, cur, min(k, len(old_segs) - 1), min(k, len(new_segs) - 1), how, kind="tools"))
    # the rest: the first segment after the tools that differs, if it is early
    rest_a, rest_b = a[n_old:], b[n_new:]
    m = common_prefix(rest_a, rest_b)
    if m < min(len(rest_a), len(rest_b)) and _early(new_segs[n_new + m].pointer, new_segs[n_new + m].kind):
        # a per-request metadata block (inspector/analyses/prompt_metadata.py) is its own cause
        block = block_of(new_segs[n_new + m], cur.api)
        out.append(_cause(prev, cur, n_old + m, n_new + m, METADATA + block.name if block else "changed"))
    return out


def _tools_end(segments: Sequence) -> int:
    """How many leading segments are tool definitions (tools come first in cache order)."""
    n = 0
    for seg in segments:
        if seg.kind != "tools":
            break
        n += 1
    return n


def _cause(prev: SessionCall, cur: SessionCall, j: int, i: int, how: str, kind: str | None = None) -> Cause:
    seg, old = cur.prompt.segments[i], prev.prompt.segments[j]
    offset, before, after = _changed_bytes(old.text, seg.text)
    lost = max(0, min(prev.tokens.total, cur.tokens.total) - cur.tokens.prefix_tokens(i))
    return Cause(seg.pointer, how, kind or seg.kind, offset, before, after, lost)


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
