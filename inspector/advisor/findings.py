"""Findings: what wastes a session's context, each with the tokens and dollars at stake and a pointer
to the evidence (docs/architecture.md, "Findings").

Seven kinds: unused tools, oversized tool results, duplicate content, overflow risk, cache-hostile
churn, breakpoints that never pay and per-request metadata that breaks a third party's cache.
Pure: a ``Session`` in, findings out. Tokens are o200k estimates; dollars price them at the call's
model's input rate (what the tokens cost when not read from cache), except churn (the read discount
lost), unpaid breakpoints (the write surcharge) and metadata breaks (the analysis's loss figure).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from ctxscope.inspector.advisor.model import Session, SessionCall, dollars, window_of
from ctxscope.inspector.advisor.replay import replay
from ctxscope.inspector.analyses.cache.memory import anthropic_points
from ctxscope.inspector.analyses.canonical_prompt import split_reminders
from ctxscope.inspector.analyses.prompt_metadata import block_at, block_of
from ctxscope.vocab.tokens import count_tokens

OVERSIZED_TOKENS = 10_000  # a tool result this long is oversized ...
OVERSIZED_SHARE = 0.05  # ... and so is one above this share of the window, whichever is lower
DUPLICATE_TOKENS = 500
OVERFLOW_SHARE = 0.8  # a context at or above this share of the window is at risk
EARLY_MESSAGES = 1  # messages/input items counted as "early" for churn
EXCERPT = 24

KINDS = (
    "unused_tools",
    "oversized_tool_result",
    "duplicate_content",
    "overflow_risk",
    "cache_churn",
    "unpaid_breakpoint",
    "per_request_metadata",
)


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    summary: str  # one line, our words (captured text only in ``evidence``)
    tokens: int  # at stake over the session
    usd: float | None
    calls: tuple[str, ...]  # the calls it concerns (the UI badges them)
    evidence: dict = field(default_factory=dict)  # call id and pointer(s) to look at

    def as_dict(self) -> dict:
        return asdict(self) | {"calls": list(self.calls)}


def findings(session: Session) -> list[Finding]:
    """Every finding of the session, the most tokens at stake first."""
    out = [
        *_unused_tools(session),
        *_oversized(session),
        *_duplicates(session),
        *_overflow(session),
        *_churn(session),
        *_unpaid(session),
        *_metadata_breaks(session),
    ]
    return sorted(out, key=lambda f: (-f.tokens, f.kind))


def by_call(found: list[Finding]) -> dict[str, list[str]]:
    """Call id -> the kinds of the findings that concern it (for badges)."""
    out: dict[str, list[str]] = defaultdict(list)
    for f in found:
        for call in f.calls:
            if f.kind not in out[call]:
                out[call].append(f.kind)
    return dict(out)


def _rate(session: Session, call: SessionCall) -> float | None:
    price = session.price(call.model)
    return price.input if price else None


def _called_tools(session: Session) -> set[str]:
    names = {s.name for c in session.calls for s in c.prompt.segments if s.kind == "tool_call" and s.name}
    for call in session.calls:
        response = call.response if isinstance(call.response, dict) else {}
        items = [*(response.get("content") or []), *(response.get("output") or [])]
        for choice in response.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            items += (message or {}).get("tool_calls") or []
        for item in items:
            if not isinstance(item, dict):
                continue
            fn: dict = item["function"] if isinstance(item.get("function"), dict) else {}
            if item.get("type") in ("tool_use", "function_call", "function", "server_tool_use"):
                names.add(item.get("name") or fn.get("name") or "")
    return names


def _unused_tools(session: Session) -> list[Finding]:
    with_tools = [c for c in session.calls if any(s.kind == "tools" for s in c.prompt.segments)]
    if not with_tools:
        return []
    declared = [{s.name for s in c.prompt.segments if s.kind == "tools" and s.name} for c in with_tools]
    every = set.intersection(*declared) - _called_tools(session)
    out = []
    for name in sorted(every):
        tokens, usd, first = 0, 0.0, None
        for call in with_tools:
            i = next(i for i, s in enumerate(call.prompt.segments) if s.kind == "tools" and s.name == name)
            first = first or (call.id, call.prompt.segments[i].pointer, call.tokens.per_segment[i])
            tokens += call.tokens.per_segment[i]
            usd += dollars(call.tokens.per_segment[i], _rate(session, call)) or 0.0
        assert first is not None
        out.append(
            Finding(
                "unused_tools",
                f"tool {name!r} declared on all {len(with_tools)} calls and never called: "
                f"~{first[2]} tokens x {len(with_tools)} calls",
                tokens,
                round(usd, 6),
                tuple(c.id for c in with_tools),
                {
                    "tool": name,
                    "call": first[0],
                    "pointer": first[1],
                    "tokens_per_call": first[2],
                    "calls": len(with_tools),
                },
            )
        )
    return out


def _oversized(session: Session) -> list[Finding]:
    out = []
    for calls in session.threads().values():
        seen: set[str] = set()
        for n, call in enumerate(calls):
            limit = min(OVERSIZED_TOKENS, int(OVERSIZED_SHARE * window_of(call.model)))
            for i, seg in enumerate(call.prompt.segments):
                tokens = call.tokens.per_segment[i]
                if seg.kind != "tool_result" or tokens < limit or seg.hash in seen:
                    continue
                seen.add(seg.hash)
                later = [c for c in calls[n + 1 :] if seg.hash in set(c.prompt.hashes)]
                if not later:
                    continue
                out.append(
                    Finding(
                        "oversized_tool_result",
                        f"a {tokens}-token tool result stays in the context for {len(later)} more call(s)",
                        tokens * len(later),
                        round(sum(dollars(tokens, _rate(session, c)) or 0.0 for c in later), 6),
                        (call.id, *(c.id for c in later)),
                        {
                            "call": call.id,
                            "pointer": seg.pointer,
                            "tokens": tokens,
                            "more_calls": len(later),
                            "tool_call_id": seg.ref,
                        },
                    )
                )
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _duplicates(session: Session) -> list[Finding]:
    groups: dict[str, dict] = {}
    for call in session.calls:
        texts: dict[str, tuple[str, list[str]]] = {}
        for seg in call.prompt.segments:
            reminders, _ = split_reminders(seg.text)
            for text in {seg.text, *reminders}:  # a whole segment, or a reminder block inside one
                if len(text) >= DUPLICATE_TOKENS:  # a shorter text cannot hold 500 tokens
                    texts.setdefault(_digest(text), (text, []))[1].append(seg.pointer)
        for digest, (text, pointers) in texts.items():
            if len(pointers) < 2 or (tokens := count_tokens(text)) < DUPLICATE_TOKENS:
                continue
            g = groups.setdefault(
                digest, {"calls": [], "tokens": 0, "usd": 0.0, "first": (call.id, pointers), "size": tokens}
            )
            g["calls"].append(call.id)
            g["tokens"] += tokens * (len(pointers) - 1)
            g["usd"] += dollars(tokens * (len(pointers) - 1), _rate(session, call)) or 0.0
    return [
        Finding(
            "duplicate_content",
            f"the same {g['size']}-token text appears {len(g['first'][1])} times in one prompt, "
            f"on {len(g['calls'])} call(s)",
            g["tokens"],
            round(g["usd"], 6),
            tuple(g["calls"]),
            {"call": g["first"][0], "pointers": g["first"][1], "tokens": g["size"]},
        )
        for g in groups.values()
    ]


def _size(call: SessionCall) -> int:
    reported = (call.usage or {}).get("input")
    return reported if isinstance(reported, int) and reported > 0 else call.tokens.total


def _overflow(session: Session) -> list[Finding]:
    out = []
    for calls in session.threads().values():
        last = calls[-1]
        window = window_of(last.model)
        size = _size(last)
        if size < OVERFLOW_SHARE * window:
            continue
        recent = calls[-5:]
        rate = (size - _size(recent[0])) / (len(recent) - 1) if len(recent) > 1 else 0.0
        left = math.ceil((window - size) / rate) if rate > 0 and size < window else (0 if size >= window else None)
        when = f"overflows in ~{left} call(s) at +{rate:.0f} tokens/call" if left is not None else "not growing"
        out.append(
            Finding(
                "overflow_risk",
                f"context at {size / window:.0%} of the {window}-token window; {when}",
                size,
                dollars(size, _rate(session, last)),
                (last.id,),
                {
                    "call": last.id,
                    "tokens": size,
                    "window": window,
                    "growth_per_call": round(rate, 1),
                    "calls_left": left,
                },
            )
        )
    return out


def _early(call: SessionCall, index: int) -> bool:
    seg = call.prompt.segments[index]
    if seg.kind in ("system", "tools"):
        return True
    parts = seg.pointer.split("/")
    in_messages = len(parts) > 2 and parts[1] in ("messages", "input") and parts[2].isdigit()
    return in_messages and int(parts[2]) < EARLY_MESSAGES


def _changed_bytes(a: str, b: str) -> tuple[int, str, str]:
    """Character offset of the first difference and an excerpt of each side around it."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, n - EXCERPT)
    return n, a[start : n + EXCERPT], b[start : n + EXCERPT]


def _metadata_breaks(session: Session) -> list[Finding]:
    """Breaks the analysis found inside a per-request metadata block (an upstream that keys its
    cache on it: inspector/analyses/prompt_metadata.py), with the client's setting that drops it."""
    groups: dict[str, dict] = {}
    for call in session.calls:
        cache = call.cache or {}
        if cache.get("verdict") != "client_break":
            continue
        block = block_at(call.prompt, cache.get("break_pointer"))
        if block is None:
            continue
        g = groups.setdefault(block.name, {"block": block, "calls": [], "tokens": 0, "usd": None, "evidence": None})
        g["calls"].append(call.id)
        g["tokens"] += int(cache.get("lost_tokens") or 0)
        if cache.get("lost_cost_usd") is not None:
            g["usd"] = (g["usd"] or 0.0) + float(cache["lost_cost_usd"])
        g["evidence"] = g["evidence"] or {"call": call.id, "pointer": cache.get("break_pointer"), "block": block.name}
    return [
        Finding(
            "per_request_metadata",
            f"{name} changes on every request and this upstream caches on it: {len(g['calls'])} break(s), "
            f"~{g['tokens']} tokens not read from cache; set {g['block'].fix}",
            g["tokens"],
            round(g["usd"], 6) if g["usd"] is not None else None,
            tuple(g["calls"]),
            g["evidence"],
        )
        for name, g in groups.items()
    ]


def _churn(session: Session) -> list[Finding]:
    groups: dict[tuple[str, str], dict] = {}
    for calls in session.threads().values():
        for prev, cur in itertools.pairwise(calls):
            if prev.model != cur.model or cur.compacted:  # a compaction rewrites early messages on purpose
                continue
            if cur.prompt.server_state or prev.prompt.server_state:  # the prefix is held server-side
                continue
            a, b = prev.prompt.hashes, cur.prompt.hashes
            i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            if i is None or not _early(cur, i) or block_of(cur.prompt.segments[i], cur.api) is not None:
                continue  # a per-request metadata block is judged by the analysis (_metadata_breaks)
            seg, old = cur.prompt.segments[i], prev.prompt.segments[i]
            tools_a = sorted(s.hash for s in prev.prompt.segments if s.kind == "tools")
            tools_b = sorted(s.hash for s in cur.prompt.segments if s.kind == "tools")
            reordered = seg.kind == "tools" and tools_a == tools_b
            lost = max(0, min(prev.tokens.total, cur.tokens.total) - cur.tokens.prefix_tokens(i))
            price = session.price(cur.model)
            usd = dollars(lost, price.input - price.cache_read) if price else None
            key = (seg.pointer, "reordered" if reordered else "changed")
            g = groups.setdefault(key, {"calls": [], "tokens": 0, "usd": 0.0, "evidence": None})
            g["calls"].append(cur.id)
            g["tokens"] += lost
            g["usd"] += usd or 0.0
            if g["evidence"] is None:
                offset, before, after = _changed_bytes(old.text, seg.text)
                g["evidence"] = {
                    "call": cur.id,
                    "previous": prev.id,
                    "pointer": seg.pointer,
                    "segment": seg.kind,
                    "reordered": reordered,
                    "offset": offset,
                    "before": before,
                    "after": after,
                }
    out = []
    for (pointer, how), g in groups.items():
        what = "tools reordered" if how == "reordered" else f"{g['evidence']['segment']} changes"
        out.append(
            Finding(
                "cache_churn",
                f"{what} at {pointer} (char {g['evidence']['offset']}) on {len(g['calls'])} call(s), "
                f"~{g['tokens']} tokens not read from cache",
                g["tokens"],
                round(g["usd"], 6),
                tuple(g["calls"]),
                g["evidence"],
            )
        )
    return out


def _unpaid(session: Session) -> list[Finding]:
    calls = [c for c in session.calls if c.family == "anthropic"]
    if not calls:
        return []
    result = replay(calls, lambda _i, call: anthropic_points(call.prompt), session.prices)
    groups: dict[str, list] = defaultdict(list)
    for write in result.unpaid():
        groups[write.pointer].append(write)
    return [
        Finding(
            "unpaid_breakpoint",
            f"the breakpoint at {pointer} wrote {sum(w.tokens for w in ws)} tokens on {len(ws)} "
            "call(s) that no later call read before they expired",
            sum(w.tokens for w in ws),
            round(sum(w.surcharge_usd for w in ws), 6),
            tuple(w.call_id for w in ws),
            {"call": ws[0].call_id, "pointer": pointer, "ttl": ws[0].ttl, "writes": len(ws)},
        )
        for pointer, ws in groups.items()
    ]
