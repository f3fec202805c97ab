"""`ctxscope search`: full-text search over the prompt and response text of every captured call."""

from __future__ import annotations

from pathlib import Path

import click

from ctxscope.proxy.redaction.mask import mask_key_values
from ctxscope.vocab.kinds import SearchArea

from ..options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_session_id
from ..output import emit_json


def _clean(text: str, start: str, end: str, *, terminal: bool = True) -> str:
    """A snippet with its matches marked and keys masked; for the terminal, control characters gone."""
    from ctxscope.inspector.store.derived.search import HIT_END, HIT_START

    text = mask_key_values(text)
    if terminal:
        text = text.replace("\n", " ⏎ ")
        text = "".join(ch if ch.isprintable() or ch in (HIT_START, HIT_END) else "?" for ch in text)
    return text.replace(HIT_START, start).replace(HIT_END, end)


@click.command(context_settings=CONTEXT)
@click.argument("text")
@db_option
@click.option("--session", help="Only this session (an id or a unique prefix of one).")
@click.option(
    "--in",
    "areas",
    multiple=True,
    type=click.Choice([a.value for a in SearchArea]),
    help="Only this part of the calls (repeatable): the system prompt, tool definitions, messages, "
    "tool results, or the responses.",
)
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many hits, best first.")
@json_option
def search(
    text: str, db_path: Path | None, session: str | None, areas: tuple[str, ...], limit: int, as_json: bool
) -> None:
    """Find TEXT (words, as one phrase) in captured prompts and responses.

    Each hit is the first call of a session that holds the text, with the JSON Pointer of the
    text in that call's request (or final response). Captures made before the search index
    existed are indexed by `ctxscope reindex`.
    """
    from ctxscope.inspector.pipeline.search_text import SegmentTexts
    from ctxscope.inspector.store.analysis_rows import count_calls
    from ctxscope.inspector.store.derived.search import index_stats
    from ctxscope.inspector.store.derived.search import search as run

    if not text.strip():
        raise click.UsageError("TEXT is empty")
    db = open_db_or_fail(db_path, segment_texts=SegmentTexts)  # snippets and phrase checks read texts back
    if session is not None:
        session = resolve_session_id(db, session)
    hits = run(db, text, session=session, areas=areas, limit=limit)
    if as_json:
        emit_json([dict(h, snippet=_clean(h["snippet"], "[", "]", terminal=False)) for h in hits])
        return
    if not hits:
        click.echo("(nothing)")
        if not index_stats(db)["segments"] and count_calls(db):
            click.echo(
                "note: the search index is empty: `ctxscope reindex` builds it for calls captured before it existed",
                err=True,
            )
        return
    for h in hits:
        where = "response" if h["body"] == "response" else "request"
        click.echo(
            f"{_clean(h['session'], '', '')}  #{h['seq']}  {h['call']}  {where} {_clean(h['pointer'], '', '')}"
            f"  ({h['area']})"
        )
        click.echo(f"    {_clean(h['snippet'], click.style('', bold=True, reset=False), click.style('', reset=True))}")
