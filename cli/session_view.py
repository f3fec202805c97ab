"""``ctxscope session`` and ``ctxscope stats`` for people: a session's timeline, its effects, cache statistics."""

from __future__ import annotations

import textwrap
from collections import Counter

import click

from ctxscope.vocab.kinds import RelationKind
from ctxscope.vocab.words import word

from .output import Column, emit_table, fit_line, fmt_int, fmt_usd, plural, safe_text, value_words
from .tables import clock_time, compaction_breaks, thread_names, verdict_word

TIMELINE_COLUMNS = [
    Column("seq", "SEQ", right=True),
    Column("started_at", "TIME", clock_time),
    Column("model", "MODEL"),  # a key cell, never cut: the others give way (output.py, ``emit_table``)
    Column("thread_label", "THREAD"),
    Column("grouped_by", "GROUPED_BY", shrink=True),
    Column("relation_label", "RELATION", shrink=True),
    Column("pointer", "POINTER", wrap=True),
    Column("tokens_estimated", "EST_TOKENS", fmt_int, right=True),
    Column("usage.input", "PROMPT", fmt_int, right=True),
    Column("usage.cache_read", "CACHE_R", fmt_int, right=True),
    Column("cache_verdict", "VERDICT", verdict_word),
    Column("lost", "LOST", fmt_int, right=True),
    Column("marker_kinds", "MARKERS", wrap=True),
]
TIMELINE_DEFAULT = ("SEQ", "THREAD", "RELATION", "POINTER", "EST_TOKENS", "VERDICT", "LOST", "MARKERS")


def _relation_label(row: dict) -> str | None:
    rel = word(RelationKind, row.get("relation"))
    return f"{rel}:{row['epoch_reason']}" if rel and row.get("epoch_reason") else rel


def marker_counts(markers: list[dict]) -> str | None:
    """Marker kinds once each, with a count when repeated ("guard_signal×3")."""
    counts = Counter(str(m.get("kind")) for m in markers)
    return ",".join(k if n == 1 else f"{k}×{n}" for k, n in counts.items()) or None


def timeline_rows(calls: list[dict], threads: list[dict]) -> list[dict]:
    names = thread_names(threads)
    out = []
    for call in calls:
        thread = call.get("thread")
        cache = call.get("cache") or {}
        out.append(
            dict(
                call,
                thread_label=names.get(thread) if thread else None,
                relation_label=_relation_label(call),
                lost=cache.get("lost_tokens") or None,
                marker_kinds=marker_counts(call.get("markers") or []),
            )
        )
    return out


FREQUENT = 10  # a kind on more calls than this is listed once, so it does not bury the rarer effects


def show_effects(calls: list[dict], width: int) -> None:
    """Each marker on the call where it took effect, in words (the tools that ran are in the table);
    a kind that recurs on many calls gets one line with its calls, after the others."""
    from ctxscope.inspector.analyses.marker_text import marker_summary

    lines = [(call["seq"], m) for call in calls for m in call.get("markers") or [] if m.get("kind") != "tools_executed"]
    if not lines:
        return
    seqs: dict[str, list[int]] = {}
    for seq, m in lines:
        seqs.setdefault(str(m.get("kind")), []).append(seq)
    frequent = {k: v for k, v in seqs.items() if len(set(v)) > FREQUENT}
    click.echo("")
    click.echo("effects (declared by the client, or inferred from the prompt):")
    for seq, m in lines:
        if str(m.get("kind")) in frequent:
            continue
        how = "declared" if (m.get("detail") or {}).get("declared") else "inferred"
        where = f"  at {value_words(m['pointer'])}" if m.get("pointer") else ""
        click.echo(fit_line(f"  #{seq:<4} {value_words(m['kind']):<25} {how}{where}", width))
        click.echo(
            textwrap.fill(value_words(marker_summary(m)), width, initial_indent=" " * 8, subsequent_indent=" " * 8)
        )
    for kind, on in frequent.items():
        listed = ", ".join(f"#{n}" for n in dict.fromkeys(on))
        click.echo(
            textwrap.fill(
                f"{value_words(kind)} on {len(set(on))} calls: {listed}",
                width,
                initial_indent="  ",
                subsequent_indent=" " * 4,
            )
        )


def _agreement_line(c: dict) -> str:
    rate = f"{c['rate']:.1%} agreement" if c["rate"] is not None else "no diagnosis yet"
    return f"agree {c['agree']}, disagree {c['disagree']}, pending {c['pending']}, none {c['none']} ({rate})"


def _token_rate(tr: dict) -> str:
    """The hit rate that matters first: the share of input tokens read from the cache."""
    read, total = tr.get("cache_read"), tr.get("input")
    share = f"{read / total:.1%}" if isinstance(read, int) and isinstance(total, int) and total else "-"
    return f"{share} ({fmt_int(read)}/{fmt_int(total)})"


def hr_calls(hr: dict, rate: str) -> str:
    return f"calls that read it: {fmt_int(hr['hits'])}/{fmt_int(hr['eligible'])} = {rate} of those that could"


def show_stats(s: dict) -> None:
    from ctxscope.vocab.figures import LOSS_PRICING

    hr, tr = s["hit_rate"], s["token_hit_rate"]
    rate = f"{hr['rate']:.1%}" if hr["rate"] is not None else "-"
    click.echo(
        f"calls: {fmt_int(s['calls'])} ({fmt_int(s['analysed'])} analysed) in {plural(s['sessions'], 'session')}, "
        f"{plural(s['threads'], 'thread')}"
    )
    click.echo(f"cache hit rate: {_token_rate(tr)} of input tokens read from cache")
    click.echo(f"  {hr_calls(hr, rate)}")
    usd = f", ${s['lost_usd']:.4f}" if s["lost_usd"] is not None else ""
    click.echo(f"lost to cache misses: {fmt_int(s['lost_tokens'])} tokens{usd}")
    click.echo(textwrap.fill(f"({LOSS_PRICING})", 100, initial_indent="  ", subsequent_indent="   "))
    if s["by_relation"]:
        click.echo("relations: " + ", ".join(f"{k} {fmt_int(n)}" for k, n in s["by_relation"].items()))
    if s["by_verdict"]:
        click.echo("verdicts: " + ", ".join(f"{k} {fmt_int(n)}" for k, n in s["by_verdict"].items()))
    d = s.get("cache_discipline")
    if d and d["comparable"]:
        click.echo(
            f"prefix kept (APPEND_ONLY or IDENTICAL): {fmt_int(d['prefix_kept'])}/{fmt_int(d['comparable'])} calls = "
            f"{d['prefix_kept_share']:.1%}"
        )
        click.echo(f"breaks: {d['breaks']} ({compaction_breaks(d)})")
        click.echo(
            f"tokens lost to breaks: {fmt_int(d['lost_tokens'])} "
            f"({fmt_int(d['lost_tokens_compactions'])} to compactions)"
        )
        click.echo(f"breaks inside the cached prefix that are not compactions: {d['violations']}")
    agreement = s.get("provider_agreement")
    if agreement and (agreement["agree"] or agreement["disagree"] or agreement["pending"]):
        click.echo(f"provider's cache diagnosis against ours: {_agreement_line(agreement)}")
        for sid, counts in (agreement.get("by_session") or {}).items():
            click.echo(f"  session {safe_text(sid)}: {_agreement_line(counts)}")
    if s["breaks"]:
        click.echo("breaks by cause:")
        emit_table(
            s["breaks"],
            [
                ("cause", "CAUSE"),
                ("segment_kind", "SEGMENT"),
                ("area", "WHERE"),
                Column("calls", "CALLS", fmt_int, right=True),
                Column("lost_tokens", "LOST_TOKENS", fmt_int, right=True),
                Column("lost_usd", "LOST_USD", fmt_usd, right=True),
            ],
        )
