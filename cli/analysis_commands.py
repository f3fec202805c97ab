"""Commands over the inspector's analysis: diff, session, stats, reindex."""

from __future__ import annotations

import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ctxscope.proxy.redaction.mask import mask_keys_in
from ctxscope.vocab.kinds import RelationKind
from ctxscope.vocab.words import word

from .options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_call, resolve_session_id
from .output import (
    Column,
    emit_json,
    emit_table,
    fmt_int,
    fmt_usd,
    pick_columns,
    plain,
    safe_text,
    terminal_width,
)
from .settings import prices_path
from .tables import (
    TOKENS_LEGEND,
    clock_time,
    columns_option,
    compaction_breaks,
    thread_names,
    verdict_word,
    wide_option,
)

if TYPE_CHECKING:  # imported when a command runs (docs/architecture.md, "Quick start-up")
    import sqlite_utils

    from ctxscope.inspector.pipeline.analyze import Analyzer

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


def make_analyzer() -> Analyzer:
    """The analyzer the daemon and reindex use, with the user's price overrides (ValueError if bad)."""
    from ctxscope.inspector.analyses.prices import load_prices
    from ctxscope.inspector.pipeline.analyze import Analyzer

    return Analyzer(prices=load_prices(prices_path()))


def _relation_label(row: dict) -> str | None:
    rel = word(RelationKind, row.get("relation"))
    return f"{rel}:{row['epoch_reason']}" if rel and row.get("epoch_reason") else rel


def marker_counts(markers: list[dict]) -> str | None:
    """Marker kinds once each, with a count when repeated ("guard_signal×3")."""
    counts = Counter(str(m.get("kind")) for m in markers)
    return ",".join(k if n == 1 else f"{k}×{n}" for k, n in counts.items()) or None


def _timeline_rows(calls: list[dict], threads: list[dict]) -> list[dict]:
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


def _show_effects(calls: list[dict], width: int) -> None:
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
        where = f"  at {_safe(m['pointer'])}" if m.get("pointer") else ""
        click.echo(_fit(f"  #{seq:<4} {_safe(m['kind']):<25} {how}{where}", width))
        click.echo(textwrap.fill(_safe(marker_summary(m)), width, initial_indent=" " * 8, subsequent_indent=" " * 8))
    for kind, on in frequent.items():
        listed = ", ".join(f"#{n}" for n in dict.fromkeys(on))
        click.echo(
            textwrap.fill(
                f"{_safe(kind)} on {len(set(on))} calls: {listed}",
                width,
                initial_indent="  ",
                subsequent_indent=" " * 4,
            )
        )


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _around(excerpts: tuple[str, str], at: int, room: int) -> tuple[str, str]:
    """Both excerpts in ``room`` characters from one start, so they stay aligned, with their
    character ``at`` (the first that differs) in view: a third of the room before it, the rest
    after; "…" marks a cut. Cut from the right only, an excerpt in a narrow terminal showed the
    shared text and hid the difference."""
    longest = max(len(e) for e in excerpts)
    start = max(0, min(at - room // 3, longest - room))

    def cut(excerpt: str) -> str:
        part = excerpt[start : start + room]
        if start > 0:
            part = "…" + part[1:]
        if start + room < len(excerpt):
            part = part[:-1] + "…"
        return part

    a, b = excerpts
    return cut(a), cut(b)


def _show_diff(d: dict, width: int) -> None:
    def echo(line: str) -> None:  # each line cut to the terminal (--wide: whole)
        click.echo(_fit(line, width))

    a, b = d["a"], d["b"]
    echo(f"a: {a['id']}  seq {a['seq']}  {a['model']}  {a['started_at']}")
    if b is None:
        echo(f"b: -  ({d['reason']})")
        return
    echo(
        f"b: {b['id']}  seq {b['seq']}  {b['model']}  {b['started_at']}"
        + ("  (a's predecessor)" if d["b_is_predecessor"] else "")
    )
    rel = d["relation"] + (f" ({d['epoch_reason']})" if d.get("epoch_reason") else "")
    echo(f"relation: {rel}" + (f"  {_safe(d['detail'])}" if d.get("detail") else ""))
    if d.get("reason"):
        echo(d["reason"])
        return
    echo(
        f"shared prefix: {fmt_int(d['shared_segments'])} segments, ~{fmt_int(d['shared_tokens'])} tokens "
        f"(a: {fmt_int(d['segments']['a'])} segments, ~{fmt_int(d['tokens']['a'])} tokens; "
        f"b: {fmt_int(d['segments']['b'])}, ~{fmt_int(d['tokens']['b'])})"
    )
    first = d.get("first_divergence")
    if first:
        echo(f"first difference at {first['pointer_a']}  (b: {first['pointer_b']})")
        text = first.get("text")
        if text:
            echo(f"  at character {fmt_int(text['offset'])}:")
            a_text, b_text = text["a_excerpt"], text["b_excerpt"]
            at = next(
                (k for k, (x, y) in enumerate(zip(a_text, b_text, strict=False)) if x != y),
                min(len(a_text), len(b_text)),
            )
            a_text, b_text = _around((a_text, b_text), at, room=max(20, width - len("  b: ")))
            echo(f"  b: {_safe(b_text)}")
            echo(f"  a: {_safe(a_text)}")
        else:
            echo(f"  b: {'(missing)' if first['b_missing'] else _safe(first['b'])}")
            echo(f"  a: {'(missing)' if first['a_missing'] else _safe(first['a'])}")
    for label, key in (("added in a", "added"), ("gone from b", "removed")):
        if d[key]:
            n = len(d[key])
            echo(f"{label}: {plural(n, 'segment')}, ~{fmt_int(sum(s['tokens'] for s in d[key]))} tokens")
            for seg in d[key][:10]:
                echo(f"  {seg['pointer']}  {seg['kind']}  ~{fmt_int(seg['tokens'])}  {_safe(seg['preview'])[:80]}")
            if n > 10:
                echo(f"  ... {fmt_int(n - 10)} more")
    if d["resent"]["segments"]:
        echo(
            f"re-sent after the difference (no longer a cached prefix): {plural(d['resent']['segments'], 'segment')}, "
            f"~{fmt_int(d['resent']['tokens'])} tokens"
        )
    for move in d["markers"]["moved"]:
        b_mark, a_mark = (_safe(move[k]) if move[k] else "no marker" for k in ("b", "a"))
        echo(f"cache marker moved at {move['pointer']}: b {b_mark} -> a {a_mark}")
    for name, change in d["params_changed"].items():
        echo(f"param {name}: b {_safe(change['b'])} -> a {_safe(change['a'])}")
    for name, change in d["cache_policy_changed"].items():
        echo(f"cache policy {name}: b {_safe(change['b'])} -> a {_safe(change['a'])}")


def _safe(value: Any) -> str:
    """A diff's value in words: a clipped value as its start and its length, a list or a mapping
    spelled out, never a Python repr (docs/architecture.md, "Human output fits the terminal")."""
    if isinstance(value, dict) and value.get("clipped"):
        start = safe_text(value.get("json_prefix") or value.get("preview") or "")[:60]
        return f"{start}… ({fmt_int(value.get('chars'))} characters, clipped)"
    if isinstance(value, (list, tuple)) and not value:
        return "none"
    if isinstance(value, (dict, list, tuple, bool, int)):
        return plain(value)
    return safe_text(value)


def _agreement_line(c: dict) -> str:
    rate = f"{c['rate']:.1%} agreement" if c["rate"] is not None else "no diagnosis yet"
    return f"agree {c['agree']}, disagree {c['disagree']}, pending {c['pending']}, none {c['none']} ({rate})"


def plural(n: Any, noun: str) -> str:
    """ "1 segment", "2 segments", "1,204 segments": the count grouped, the noun agreeing with it."""
    return f"{fmt_int(n)} {noun}{'' if n == 1 else 's'}"


def _token_rate(tr: dict) -> str:
    """The hit rate that matters first: the share of input tokens read from the cache."""
    read, total = tr.get("cache_read"), tr.get("input")
    share = f"{read / total:.1%}" if isinstance(read, int) and isinstance(total, int) and total else "-"
    return f"{share} ({fmt_int(read)}/{fmt_int(total)})"


def hr_calls(hr: dict, rate: str) -> str:
    return f"calls that read it: {fmt_int(hr['hits'])}/{fmt_int(hr['eligible'])} = {rate} of those that could"


def _show_stats(s: dict) -> None:
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


@click.command(context_settings=CONTEXT)
@click.argument("a")
@click.argument("b", required=False)
@db_option
@click.option("--max-chars", type=int, default=4000, show_default=True, help="Clip values longer than this.")
@wide_option
@json_option
def diff(a: str, b: str | None, db_path: Path | None, max_chars: int, wide: bool, as_json: bool) -> None:
    """Compare call A's prompt with call B's (default: A's predecessor): first difference first."""
    from ctxscope.inspector.reading.calldiff import diff_calls

    db = open_db_or_fail(db_path)
    a = resolve_call(db, a)
    b = resolve_call(db, b) if b is not None else None
    try:
        result = diff_calls(db, a, b, max_chars=max_chars)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0]) if exc.args else str(exc)) from exc
    result = mask_keys_in(result)  # excerpts of the prompts: keys the client put there stay out
    emit_json(result) if as_json else _show_diff(result, 10**6 if wide else terminal_width())


@click.command(context_settings=CONTEXT)
@click.argument("session")
@db_option
@columns_option
@wide_option
@json_option
def session(session: str, db_path: Path | None, columns: str | None, wide: bool, as_json: bool) -> None:
    """Timeline of one session (SESSION is an id or a unique prefix): relations, tokens, cache, markers."""
    from ctxscope.inspector.store.analysis_queries import session_timeline

    cols = pick_columns(TIMELINE_COLUMNS, columns, TIMELINE_DEFAULT, wide)
    db = open_db_or_fail(db_path)
    timeline = session_timeline(db, resolve_session_id(db, session))
    assert timeline is not None  # resolved above
    timeline = mask_keys_in(timeline)
    if as_json:
        emit_json(timeline)
        return
    grouped = Counter(c["grouped_by"] for c in timeline["calls"] if c.get("grouped_by"))
    why = ", ".join(f"{k} {n}" for k, n in grouped.most_common()) or "-"
    click.echo(f"session {timeline['session']}  (from {timeline['session_source'] or '-'}; grouped by: {why})")
    emit_table(_timeline_rows(timeline["calls"], timeline["threads"]), cols, wide=wide)
    click.echo(TOKENS_LEGEND)
    _show_effects(timeline["calls"], 10**6 if wide else terminal_width())
    click.echo("")
    _show_stats(timeline["stats"])


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only this session (an id or a unique prefix of one).")
@json_option
def stats(db_path: Path | None, session: str | None, as_json: bool) -> None:
    """Cache statistics: calls, hit rate, breaks by cause, tokens and cost lost."""
    from ctxscope.inspector.store.analysis_queries import stats as compute
    from ctxscope.vocab.figures import LOSS_PRICING

    db = open_db_or_fail(db_path)
    if session is not None:
        session = resolve_session_id(db, session)
    result = compute(db, session=session) | {"lost_pricing": LOSS_PRICING}
    emit_json(result) if as_json else _show_stats(result)


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only the calls of this session (an id or a unique prefix of one).")
@json_option
def reindex(db_path: Path | None, session: str | None, as_json: bool) -> None:
    """Recompute the analysis of stored calls (relations, threads, tokens, cache verdicts, markers)."""
    from ctxscope.inspector.pipeline.reindex import reindex as run
    from ctxscope.inspector.pipeline.search_text import SegmentTexts
    from ctxscope.inspector.store.analysis_rows import count_calls

    db = open_db_or_fail(db_path, segment_texts=SegmentTexts)  # clearing a session's index reads its texts back
    if session:
        session = resolve_session_id(db, session)
    try:
        analyzer = make_analyzer()
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"bad price file: {exc}") from exc
    total = count_calls(db, session or None)
    done = 0
    if sys.stderr.isatty() and not as_json:
        with click.progressbar(
            run(db, session=session, analyzer=analyzer), length=total, label="reindexing", file=sys.stderr
        ) as bar:
            for _ in bar:
                done += 1
    else:
        for _ in run(db, session=session, analyzer=analyzer):
            done += 1
    indexed = _backfill_search(db, session, total, show_bar=sys.stderr.isatty() and not as_json)
    result = {"reindexed": done, "search_indexed": indexed, "session": session}
    emit_json(result) if as_json else click.echo(f"reindexed {done} call(s), search index rebuilt")


def _backfill_search(db: sqlite_utils.Database, session: str | None, total: int, *, show_bar: bool) -> int:
    """Rebuild the search index after the analysis (it reads the sessions the analysis settled on)."""
    from ctxscope.inspector.pipeline.search_index import backfill

    done = 0
    if show_bar:
        with click.progressbar(
            backfill(db, session=session), length=total, label="indexing text", file=sys.stderr
        ) as bar:
            for _ in bar:
                done += 1
        return done
    for _ in backfill(db, session=session):
        done += 1
    return done
