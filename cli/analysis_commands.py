"""Commands over the inspector's analysis: diff, session, stats, reindex."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ctxscope.proxy.redaction.mask import mask_keys_in

from .diff_view import show_diff
from .options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_call, resolve_session_id
from .output import emit_json, emit_table, pick_columns, terminal_width
from .session_view import TIMELINE_COLUMNS, TIMELINE_DEFAULT, show_effects, show_stats, timeline_rows
from .settings import prices_path
from .tables import TOKENS_LEGEND, columns_option, wide_option

if TYPE_CHECKING:  # imported when a command runs (docs/architecture.md, "Quick start-up")
    import sqlite_utils

    from ctxscope.inspector.pipeline.analyze import Analyzer


def make_analyzer() -> Analyzer:
    """The analyzer the daemon and reindex use, with the user's price overrides (ValueError if bad)."""
    from ctxscope.inspector.analyses.prices import load_prices
    from ctxscope.inspector.pipeline.analyze import Analyzer

    return Analyzer(prices=load_prices(prices_path()))


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
    emit_json(result) if as_json else show_diff(result, 10**6 if wide else terminal_width())


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
    emit_table(timeline_rows(timeline["calls"], timeline["threads"]), cols, wide=wide)
    click.echo(TOKENS_LEGEND)
    show_effects(timeline["calls"], 10**6 if wide else terminal_width())
    click.echo("")
    show_stats(timeline["stats"])


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
    emit_json(result) if as_json else show_stats(result)


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
