"""Commands over the inspector's analysis: diff, session, stats, reindex."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import click

from ctxscope.proxy.redaction.mask import mask_key_values, mask_keys_in

from .options import CONTEXT, db_option, json_option, open_db_or_fail
from .output import emit_json, emit_table
from .settings import home_dir

TIMELINE_COLUMNS = [
    ("seq", "SEQ"), ("started_at", "TIME"), ("model", "MODEL"), ("thread_label", "THREAD"),
    ("grouped_by", "GROUPED_BY"), ("relation_label", "RELATION"),
    ("pointer", "POINTER"), ("tokens_estimated", "TOKENS"), ("usage.cache_read", "CACHE_R"),
    ("cache_verdict", "VERDICT"), ("lost", "LOST"), ("marker_kinds", "MARKERS"),
]  # fmt: skip


def prices_path() -> Path | None:
    """CTXSCOPE_PRICES, else $CTXSCOPE_HOME/prices.json when it exists."""
    env = os.environ.get("CTXSCOPE_PRICES")
    if env:
        return Path(env).expanduser()
    path = home_dir() / "prices.json"
    return path if path.exists() else None


def make_analyzer():
    """The analyzer the daemon and reindex use, with the user's price overrides (ValueError if bad)."""
    from ctxscope.inspector.analyses.prices import load_prices
    from ctxscope.inspector.analyze import Analyzer

    return Analyzer(prices=load_prices(prices_path()))


def _relation_label(row: dict) -> str | None:
    rel = row.get("relation")
    return f"{rel}:{row['epoch_reason']}" if rel and row.get("epoch_reason") else rel


def _thread_names(threads: list[dict]) -> dict[str, str]:
    """"main T1", "side T2" ...: the store's thread order, as the web UI names them."""
    flat = [t for top in threads for t in (top, *top.get("children", ()))]
    return {t["thread"]: f"{'main' if t.get('main') else 'side'} T{t.get('index', i) + 1}" for i, t in enumerate(flat)}


def _timeline_rows(calls: list[dict], threads: list[dict]) -> list[dict]:
    names = _thread_names(threads)
    out = []
    for call in calls:
        thread = call.get("thread")
        cache = call.get("cache") or {}
        out.append(dict(call, thread_label=names.get(thread) if thread else None, relation_label=_relation_label(call),
                        lost=cache.get("lost_tokens") or None,
                        marker_kinds=",".join(m["kind"] for m in call.get("markers") or []) or None))  # fmt: skip
    return out


def _show_effects(calls: list[dict]) -> None:
    """Each marker on the call where it took effect, in words (the tools that ran are in the table)."""
    from ctxscope.inspector.analyses.marker_text import marker_summary

    lines = [(call["seq"], m) for call in calls for m in call.get("markers") or [] if m.get("kind") != "tools_executed"]
    if not lines:
        return
    click.echo("")
    click.echo("effects (declared by the client, or inferred from the prompt):")
    for seq, m in lines:
        how = "declared" if (m.get("detail") or {}).get("declared") else "inferred"
        where = f"  at {m['pointer']}" if m.get("pointer") else ""
        click.echo(f"  #{seq:<4} {_safe(m['kind']):<25} {how:<8} {_safe(marker_summary(m))}{_safe(where)}")


def _show_diff(d: dict) -> None:
    a, b = d["a"], d["b"]
    click.echo(f"a: {a['id']}  seq {a['seq']}  {a['model']}  {a['started_at']}")
    if b is None:
        click.echo(f"b: -  ({d['reason']})")
        return
    click.echo(f"b: {b['id']}  seq {b['seq']}  {b['model']}  {b['started_at']}"
               + ("  (a's predecessor)" if d["b_is_predecessor"] else ""))  # fmt: skip
    rel = d["relation"] + (f" ({d['epoch_reason']})" if d.get("epoch_reason") else "")
    click.echo(f"relation: {rel}" + (f"  {d['detail']}" if d.get("detail") else ""))
    if d.get("reason"):
        click.echo(d["reason"])
        return
    click.echo(f"shared prefix: {d['shared_segments']} segments, ~{d['shared_tokens']} tokens "
               f"(a: {d['segments']['a']} segments, ~{d['tokens']['a']} tokens; "
               f"b: {d['segments']['b']}, ~{d['tokens']['b']})")  # fmt: skip
    first = d.get("first_divergence")
    if first:
        click.echo(f"first difference at {first['pointer_a']}  (b: {first['pointer_b']})")
        text = first.get("text")
        if text:
            click.echo(f"  at char {text['offset']}:")
            click.echo(f"  b: {_safe(text['b_excerpt'])}")
            click.echo(f"  a: {_safe(text['a_excerpt'])}")
        else:
            click.echo(f"  b: {'(missing)' if first['b_missing'] else _safe(first['b'])}")
            click.echo(f"  a: {'(missing)' if first['a_missing'] else _safe(first['a'])}")
    for label, key in (("added in a", "added"), ("gone from b", "removed")):
        if d[key]:
            click.echo(f"{label}: {len(d[key])} segment(s), ~{sum(s['tokens'] for s in d[key])} tokens")
            for seg in d[key][:10]:
                click.echo(f"  {seg['pointer']}  {seg['kind']}  ~{seg['tokens']}  {_safe(seg['preview'])[:80]}")
            if len(d[key]) > 10:
                click.echo(f"  ... {len(d[key]) - 10} more")
    if d["resent"]["segments"]:
        click.echo(f"re-sent after the difference (no longer a cached prefix): {d['resent']['segments']} segment(s), "
                   f"~{d['resent']['tokens']} tokens")  # fmt: skip
    for move in d["markers"]["moved"]:
        click.echo(f"cache marker moved at {move['pointer']}: {move['b']} -> {move['a']}")
    for name, change in d["params_changed"].items():
        click.echo(f"param {name}: {_safe(change['b'])} -> {_safe(change['a'])}")
    for name, change in d["cache_policy_changed"].items():
        click.echo(f"cache policy {name}: {_safe(change['b'])} -> {_safe(change['a'])}")


def _safe(value) -> str:
    text = "-" if value is None else mask_key_values(str(value))
    return "".join(ch if ch.isprintable() else "?" for ch in text.replace("\n", "⏎"))


def _show_stats(s: dict) -> None:
    hr, tr = s["hit_rate"], s["token_hit_rate"]
    rate = f"{hr['rate']:.1%}" if hr["rate"] is not None else "-"
    click.echo(f"calls: {s['calls']} ({s['analysed']} analysed) in {s['sessions']} session(s), "
               f"{s['threads']} thread(s)")
    click.echo(f"cache hit rate: {hr['hits']}/{hr['eligible']} calls = {rate}   "
               f"(tokens read from cache: {tr['cache_read']}/{tr['input']})")  # fmt: skip
    usd = f", ${s['lost_usd']:.4f}" if s["lost_usd"] is not None else ""
    click.echo(f"lost to cache misses: {s['lost_tokens']} tokens{usd}")
    if s["by_relation"]:
        click.echo("relations: " + ", ".join(f"{k} {n}" for k, n in s["by_relation"].items()))
    if s["by_verdict"]:
        click.echo("verdicts: " + ", ".join(f"{k} {n}" for k, n in s["by_verdict"].items()))
    d = s.get("cache_discipline")
    if d and d["comparable"]:
        click.echo(f"prefix kept (APPEND_ONLY or IDENTICAL): {d['prefix_kept']}/{d['comparable']} calls = "
                   f"{d['prefix_kept_share']:.1%}; breaks: {d['breaks']} ({d['compaction_breaks']} compactions), "
                   f"{d['lost_tokens']} tokens lost to them ({d['lost_tokens_compactions']} to compactions)")
        click.echo(f"breaks inside the cached prefix that are not compactions: {d['violations']}")
    if s["breaks"]:
        click.echo("breaks by cause:")
        emit_table(s["breaks"], [("cause", "CAUSE"), ("segment_kind", "SEGMENT"), ("area", "WHERE"),
                                 ("calls", "CALLS"), ("lost_tokens", "LOST_TOKENS"),
                                 ("lost_usd", "LOST_USD")])  # fmt: skip


@click.command(context_settings=CONTEXT)
@click.argument("a")
@click.argument("b", required=False)
@db_option
@click.option("--max-chars", type=int, default=4000, show_default=True, help="Clip values longer than this.")
@json_option
def diff(a, b, db_path, max_chars, as_json):
    """Compare call A's prompt with call B's (default: A's predecessor): first difference first."""
    from ctxscope.inspector.calldiff import diff_calls
    from ctxscope.inspector.store.queries import AmbiguousCallId

    try:
        result = diff_calls(open_db_or_fail(db_path), a, b, max_chars=max_chars)
    except (KeyError, AmbiguousCallId) as exc:
        raise click.ClickException(str(exc.args[0]) if exc.args else str(exc)) from exc
    result = mask_keys_in(result)  # excerpts of the prompts: keys the client put there stay out
    emit_json(result) if as_json else _show_diff(result)


@click.command(context_settings=CONTEXT)
@click.argument("session")
@db_option
@json_option
def session(session, db_path, as_json):
    """Timeline of one session (SESSION is an id or a unique prefix): relations, tokens, cache, markers."""
    from ctxscope.inspector.store.analysis_queries import session_timeline
    from ctxscope.inspector.store.queries import AmbiguousCallId

    try:
        timeline = session_timeline(open_db_or_fail(db_path), session)
    except AmbiguousCallId as exc:
        raise click.ClickException(str(exc)) from exc
    if timeline is None:
        raise click.ClickException(f"no session matches {session!r}")
    timeline = mask_keys_in(timeline)
    if as_json:
        emit_json(timeline)
        return
    grouped = Counter(c["grouped_by"] for c in timeline["calls"] if c.get("grouped_by"))
    why = ", ".join(f"{k} {n}" for k, n in grouped.most_common()) or "-"
    click.echo(f"session {timeline['session']}  (from {timeline['session_source'] or '-'}; grouped by: {why})")
    emit_table(_timeline_rows(timeline["calls"], timeline["threads"]), TIMELINE_COLUMNS)
    _show_effects(timeline["calls"])
    click.echo("")
    _show_stats(timeline["stats"])


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only this session (an id or a unique prefix of one).")
@json_option
def stats(db_path, session, as_json):
    """Cache statistics: calls, hit rate, breaks by cause, tokens and cost lost."""
    from ctxscope.inspector.store.analysis_queries import resolve_session
    from ctxscope.inspector.store.analysis_queries import stats as compute
    from ctxscope.inspector.store.queries import AmbiguousCallId

    db = open_db_or_fail(db_path)
    if session is not None:
        try:
            full = resolve_session(db, session)
        except AmbiguousCallId as exc:
            raise click.ClickException(str(exc)) from exc
        if full is None:
            raise click.ClickException(f"no session matches {session!r}")
        session = full
    result = compute(db, session=session)
    emit_json(result) if as_json else _show_stats(result)


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only the calls of this session.")
@json_option
def reindex(db_path, session, as_json):
    """Recompute the analysis of stored calls (relations, threads, tokens, cache verdicts, markers)."""
    from ctxscope.inspector.analyze import reindex as run
    from ctxscope.inspector.store.analysis_rows import count_calls

    db = open_db_or_fail(db_path)
    try:
        analyzer = make_analyzer()
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"bad price file: {exc}") from exc
    total = count_calls(db, session or None)
    done = 0
    if sys.stderr.isatty() and not as_json:
        with click.progressbar(run(db, session=session, analyzer=analyzer), length=total,
                               label="reindexing", file=sys.stderr) as bar:  # fmt: skip
            for _ in bar:
                done += 1
    else:
        for _ in run(db, session=session, analyzer=analyzer):
            done += 1
    indexed = _backfill_search(db, session, total, show_bar=sys.stderr.isatty() and not as_json)
    result = {"reindexed": done, "search_indexed": indexed, "session": session}
    emit_json(result) if as_json else click.echo(f"reindexed {done} call(s), search index rebuilt")


def _backfill_search(db, session: str | None, total: int, *, show_bar: bool) -> int:
    """Rebuild the search index after the analysis (it reads the sessions the analysis settled on)."""
    from ctxscope.inspector.search_index import backfill

    done = 0
    if show_bar:
        with click.progressbar(backfill(db, session=session), length=total, label="indexing text",
                               file=sys.stderr) as bar:  # fmt: skip
            for _ in bar:
                done += 1
        return done
    for _ in backfill(db, session=session):
        done += 1
    return done
