"""Read-only queries over the capture index: calls, show, sessions."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils

import click

from ctxscope.vocab.kinds import CacheVerdict, RelationKind
from ctxscope.vocab.words import choices, value_of

from .options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_call, resolve_session_id
from .output import (
    emit_fields,
    emit_json,
    emit_table,
    fmt_int,
    fmt_usd,
    pick_columns,
    safe_text,
)
from .settings import default_db_path
from .tables import (
    CALL_COLUMNS,
    CALL_DEFAULT,
    SESSION_COLUMNS,
    SESSION_DEFAULT,
    TOKEN_HEADERS,
    TOKENS_LEGEND,
    columns_option,
    relation_word,
    thread_names,
    usd_legend,
    verdict_word,
    wide_option,
)


def resolve_threads(db: sqlite_utils.Database, label: str, session: str | None) -> list[str]:
    """The threads a --thread value names: "main", "side", "T2", "main T1" (as the views name them), or
    a thread id or a unique prefix of one; in ``session``, else in every session."""
    from ctxscope.inspector.store.queries import list_sessions, session_threads

    sessions = [session] if session else [s["session"] for s in list_sessions(db, purposes=True)]
    want = label.strip().lower()
    named, by_id = [], []
    for s in sessions:
        for thread, name in thread_names(session_threads(db, s)).items():
            role, number = name.split()
            if want in (name.lower(), role, number.lower()):
                named.append(thread)
            elif thread.startswith(label.strip()):
                by_id.append(thread)
    if named:
        return named
    if len(set(by_id)) > 1:
        from .options import pick_id

        pick_id("thread", label, sorted(set(by_id))[:10], len(set(by_id)) > 10)
    if not by_id:  # a thread no session has is a mistake to say, not an empty list
        from .options import IdError

        where = f"session {session}" if session else "any session"
        raise IdError(f"no thread {label!r} in {where} (try main, side, T1, T2 ... or a thread id)")
    return by_id


def _choice(kind: type[StrEnum]) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        found = value_of(kind, value)
        if found is None:
            raise click.BadParameter(f"{value!r} is none of {', '.join(choices(kind))}")
        return found

    return convert


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only calls of this session (an id or a unique prefix of one).")
@click.option("--model", help="Only calls to this model.")
@click.option(
    "--relation",
    metavar="KIND",
    callback=_choice(RelationKind),
    help=f"Only calls with this prefix relation to their predecessor: {', '.join(choices(RelationKind))}.",
)
@click.option(
    "--pointer-prefix",
    metavar="POINTER",
    help="Only calls whose first difference lies at or below this JSON pointer (e.g. /system).",
)
@click.option(
    "--verdict",
    metavar="VERDICT",
    callback=_choice(CacheVerdict),
    help=f"Only calls with this cache verdict: {', '.join(choices(CacheVerdict))}.",
)
@click.option("--thread", help='Only calls of this thread: "main", "side", "T2", or a thread id or prefix.')
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many calls, newest first.")
@columns_option
@wide_option
@json_option
def calls(
    db_path: Path | None,
    session: str | None,
    model: str | None,
    relation: str | None,
    pointer_prefix: str | None,
    verdict: str | None,
    thread: str | None,
    limit: int,
    columns: str | None,
    wide: bool,
    as_json: bool,
) -> None:
    """List captured calls, optionally filtered by their analysis.

    The default columns fit 100 characters; --columns picks others, --wide prints them all."""
    from ctxscope.inspector.store.analysis_queries import find_calls

    cols = pick_columns(CALL_COLUMNS, columns, CALL_DEFAULT, wide)
    db = open_db_or_fail(db_path)
    if session is not None:
        session = resolve_session_id(db, session)
    threads = resolve_threads(db, thread, session) if thread is not None else None
    rows = find_calls(
        db,
        session=session,
        model=model,
        relation=relation,
        pointer_prefix=pointer_prefix,
        verdict=verdict,
        threads=threads,
        limit=limit,
    )
    if as_json:
        emit_json(rows)
        return
    if session is not None:  # the table's header: which session, by its title
        click.echo(session_heading(db, session))
    emit_table(rows, cols, wide=wide)
    if rows and any(c.header in TOKEN_HEADERS for c in cols):
        click.echo(TOKENS_LEGEND)
    storing_note(db_path)


def session_heading(db: sqlite_utils.Database, session: str) -> str:
    """``session ID "title"`` (the title stored with its first calls; a named session's is its id)."""
    from ctxscope.inspector.store.derived import titles

    title = titles.title(db, session)
    heading = f"session {safe_text(session)}"
    return f'{heading}  "{safe_text(title)}"' if title and title != session else heading


def storing_note(db_path: Path | None) -> None:
    """Say so when captured calls are still on their way to the store: the daemon stores them a
    moment after they end, so a call just made may not be listed yet."""
    from ctxscope.inspector.reading.db_status import capture_state, spool_status

    path = db_path or default_db_path()
    capture, spool = capture_state(path), spool_status(path)
    waiting = capture.get("waiting") or 0
    if waiting or spool.get("bytes"):
        click.echo(
            f"note: {waiting or 'some'} captured call(s) not stored yet: the daemon stores calls a moment "
            "after they end; run this again in a second",
            err=True,
        )


@click.command(context_settings=CONTEXT)
@click.argument("call")
@db_option
@click.option(
    "--request-raw",
    is_flag=True,
    help="Write the request body to stdout as forwarded, key-like values masked (see --exact).",
)
@click.option(
    "--response-raw",
    is_flag=True,
    help="Write the response body to stdout as received, key-like values masked (see --exact).",
)
@click.option(
    "--exact",
    is_flag=True,
    help="With --request-raw/--response-raw: the exact bytes, unmasked. They may contain "
    "secrets the client put in the body (API keys, tokens, passwords).",
)
@click.option("--lines", type=int, default=6, show_default=True, help="How many lines of the answer to print.")
@json_option
def show(
    call: str, db_path: Path | None, request_raw: bool, response_raw: bool, exact: bool, lines: int, as_json: bool
) -> None:
    """Show one call (CALL is an id or a unique prefix of one): its place in the session, relation,
    cache verdict, tokens reported and estimated, markers and the answer's first lines."""
    from ctxscope.inspector.store import queries

    if exact and not (request_raw or response_raw):
        raise click.UsageError("--exact goes with --request-raw or --response-raw")
    if request_raw and response_raw:
        raise click.UsageError("--request-raw and --response-raw each write one body to stdout: give one of them")
    db = open_db_or_fail(db_path)
    row = queries.get_call(db, resolve_call(db, call))
    assert row is not None  # resolved above
    if request_raw or response_raw:
        _write_raw(db, row, "request" if request_raw else "response", exact)
        return
    if as_json:
        row = dict(row)
        row["request"] = queries.get_request_json(db, row["id"])
        row["response"] = queries.get_final_response(db, row["id"])
        emit_json(row)
        return
    _tell_story(db, row, lines)


def _write_raw(db: sqlite_utils.Database, row: dict, kind: str, exact: bool) -> None:
    from ctxscope.inspector.share.bodies import export_body

    body = export_body(db, row["id"], kind, "wire", exact=exact)
    if body is None:
        raise click.ClickException(f"call {row['id']} has no {kind} body stored")
    if body.form == "decoded":
        click.echo(
            f"note: the {kind} body is compressed ({row.get(kind + '_encoding')}) and holds key-like "
            "values: written decoded, with them masked (--exact writes the bytes as sent)",
            err=True,
        )
    elif body.masked:
        click.echo(
            f"note: key-like values in the {kind} body are masked, length for length "
            "(--exact writes the bytes as sent)",
            err=True,
        )
    if sys.stdout.isatty():  # bytes as sent go to a file or a pipe; a terminal gets them as harmless text
        click.echo(body.data.decode("utf-8", "replace"))
        return
    sys.stdout.buffer.write(body.data)
    sys.stdout.buffer.flush()


def _tell_story(db: sqlite_utils.Database, row: dict, lines: int) -> None:
    """A call in words: where it sits, how its prompt relates to the one before, what the cache did,
    the tokens (reported by the provider and estimated here), the markers and the answer's start."""
    from ctxscope.inspector.analyses.cache.provider_agreement import diagnosis_sentence
    from ctxscope.inspector.analyses.marker_text import marker_summary
    from ctxscope.inspector.store import queries

    names = thread_names(queries.session_threads(db, row["session"])) if row.get("thread") else {}
    thread = names.get(row.get("thread") or "", "-")
    where = f"call {row['id']}  #{row.get('seq')} of {session_heading(db, row['session'])}"
    click.echo(f"{where}  ({safe_text(thread)} thread)" if thread != "-" else where)
    status = f"{row.get('status') or '-'} {row.get('outcome') or ''}".strip()
    if row.get("error"):
        status += f" ({safe_text(row['error'])})"
    timing = f"{_ms(row.get('ttfb_ms'))} to first byte, " if row.get("ttfb_ms") is not None else ""
    timing += f"{_ms(row.get('duration_ms'))} in all" if row.get("duration_ms") is not None else ""
    pred = queries.get_call(db, row["predecessor"]) if row.get("predecessor") else None
    rel = row.get("relation")
    relation = "not analysed yet" if rel is None else f"{relation_word(rel)} ({rel})"
    if pred is not None:
        relation += f" to #{pred['seq']} {pred['id']}"
    if row.get("epoch_reason"):
        relation += f", {row['epoch_reason']}"
    cache = row.get("cache") or {}
    verdict = row.get("cache_verdict")
    verdict_text = "-" if verdict is None else f"{verdict_word(verdict)} ({verdict})"
    if cache.get("detail"):
        verdict_text += f": {safe_text(cache['detail'])}"
    if cache.get("lost_tokens"):
        verdict_text += f"; {fmt_int(cache['lost_tokens'])} tokens lost" + (
            f" ({fmt_usd(cache['lost_cost_usd'])})"
            if cache.get("lost_cost_usd") is not None
            else f" (unpriced: {cache['unpriced']})"
            if cache.get("unpriced")
            else ""
        )
    usage = row.get("usage")
    reported = (
        "not reported"
        if usage is None
        else (
            f"in {fmt_int(usage['input'])}, cache read {fmt_int(usage['cache_read'])}, "
            f"cache write {fmt_int(usage['cache_write'])}, out {fmt_int(usage['output'])}"
        )
    )
    emit_fields(
        [
            ("when", f"{row.get('started_at')}  ({'streamed' if row.get('stream') else 'not streamed'})"),
            (
                "call",
                f"{row.get('method')} {safe_text(row.get('path'))} via {safe_text(row.get('provider'))}"
                f"  {safe_text(row.get('api'))}  model {safe_text(row.get('model'))}",
            ),
            ("status", status + (f"; {timing}" if timing else "")),
            ("relation", relation),
            ("pointer", safe_text(row.get("pointer")) if row.get("pointer") else "- (no difference inside the prompt)"),
            ("cache", verdict_text),
            ("provider", safe_text(diagnosis_sentence(cache) or "- (the client did not ask for a diagnosis)")),
            ("reported", f"{reported}  (by the provider)"),
            ("estimated", f"{fmt_int(row.get('tokens_estimated'))} prompt tokens  (counted by ctxscope)"),
        ],
        indent=2,
    )
    markers = row.get("markers") or []
    if markers:
        click.echo("  markers:")
        for m in markers:
            click.echo(f"    {safe_text(m.get('kind'))}: {safe_text(marker_summary(m))}"[:200])
    answer = _answer_lines(queries.get_final_response(db, row["id"]))
    click.echo("  answer:" + ("" if answer else " -"))
    for line in answer[:lines]:
        click.echo(f"    {safe_text(line)[:96]}")
    if len(answer) > lines:
        click.echo(f"    ... {len(answer) - lines} more line(s) (--lines, or --json)")


def _ms(value: Any) -> str:
    return f"{value:.1f} ms" if value < 10 else f"{value:,.0f} ms"


def _answer_lines(resp: Any) -> list[str]:
    """The answer's text and tool calls, line by line, for Anthropic, OpenAI Chat and Responses bodies."""
    if not isinstance(resp, dict):
        return []
    parts: list[str] = []

    def tool(name: Any, args: Any) -> None:
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        parts.append(f"[tool call {name} {text}]")

    for block in resp.get("content") or []:  # Anthropic
        if isinstance(block, dict):
            if block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                tool(block.get("name"), block.get("input"))
    for choice in resp.get("choices") or []:  # OpenAI Chat
        msg = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(msg, dict):
            if msg.get("content"):
                parts.append(str(msg["content"]))
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function") or {} if isinstance(tc, dict) else {}
                tool(fn.get("name"), fn.get("arguments"))
    for item in resp.get("output") or []:  # OpenAI Responses
        if isinstance(item, dict):
            if item.get("type") == "function_call":
                tool(item.get("name"), item.get("arguments"))
            for c in item.get("content") or []:
                if isinstance(c, dict) and c.get("text"):
                    parts.append(str(c["text"]))
    if resp.get("error") and not parts:
        parts.append(f"error: {json.dumps(resp['error'], ensure_ascii=False)}")
    return [line for part in parts for line in part.splitlines() or [""]]


@click.command(context_settings=CONTEXT)
@db_option
@columns_option
@wide_option
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also the sessions ctxscope made itself (replays, advise --verify, non-model requests of "
    "known clients), with their PURPOSE.",
)
@json_option
def sessions(db_path: Path | None, columns: str | None, wide: bool, show_all: bool, as_json: bool) -> None:
    """List sessions with their call and thread counts, models, cache hit rate, breaks and cost lost.

    Sessions ctxscope made itself are left out unless --all (docs: "Sessions with a purpose")."""
    from ctxscope.inspector.store.derived import titles
    from ctxscope.inspector.store.queries import list_sessions
    from ctxscope.web.overview import session_cost

    default = ("SESSION", "PURPOSE", *SESSION_DEFAULT[1:]) if show_all else SESSION_DEFAULT
    cols = pick_columns(SESSION_COLUMNS, columns, default, wide)
    store = open_db_or_fail(db_path)
    rows = list_sessions(
        store,
        cost=lambda a: _cost_and_reason(*session_cost(a)),  # the UI's cost and why none
        purposes=show_all,
    )
    named = titles.of(store, [r["session"] for r in rows])
    for r in rows:
        r["title"] = named[r["session"]]
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        r["thread_count"] = sum(1 + len(t.get("children") or ()) for t in r.get("threads") or ())
        if r.get("cost_usd") is None and r.get("cost_unpriced"):
            r["cost_usd"] = "unpriced"  # the table says so; --json keeps None and the reason
    emit_table(rows, cols, wide=wide)
    if any(c.header in ("LOST_USD", "COST_USD") for c in cols):
        click.echo(usd_legend(rows))
    storing_note(db_path)


def _cost_and_reason(cost: float | None, _guessed: bool, unpriced: str | None) -> tuple[float | None, str | None]:
    return cost, unpriced
