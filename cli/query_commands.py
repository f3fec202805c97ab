"""Read-only queries over the capture index: calls, show, sessions, db."""

from __future__ import annotations

import sys

import click

from ctxscope.proxy.redaction.mask import mask_key_values
from ctxscope.vocab.kinds import CacheVerdict, RelationKind

from .options import CONTEXT, db_option, json_option, open_db_or_fail
from .output import emit_json, emit_table
from .settings import default_db_path

CALL_COLUMNS = [
    ("id", "ID"), ("session", "SESSION"), ("seq", "SEQ"), ("started_at", "STARTED"), ("api", "API"),
    ("model", "MODEL"), ("status", "STATUS"), ("outcome", "OUTCOME"), ("usage.input", "IN"),
    ("usage.cache_read", "CACHE_R"), ("usage.cache_write", "CACHE_W"), ("usage.output", "OUT"),
    ("duration_ms", "MS"), ("relation", "RELATION"), ("pointer", "POINTER"), ("cache_verdict", "VERDICT"),
]
SESSION_COLUMNS = [
    ("session", "SESSION"), ("calls", "CALLS"), ("models", "MODELS"), ("first_started_at", "FIRST"),
    ("last_started_at", "LAST"), ("hit_rate.rate", "HIT_RATE"), ("breaks", "BREAKS"),
]


@click.command(context_settings=CONTEXT)
@db_option
@click.option("--session", help="Only calls of this session.")
@click.option("--model", help="Only calls to this model.")
@click.option("--relation", type=click.Choice([k.value for k in RelationKind], case_sensitive=False),
              help="Only calls with this prefix relation to their predecessor.")
@click.option("--pointer-prefix", metavar="POINTER",
              help="Only calls whose first difference lies at or below this JSON pointer (e.g. /system).")
@click.option("--verdict", type=click.Choice([v.value for v in CacheVerdict]),
              help="Only calls with this cache verdict.")
@click.option("--thread", help="Only calls of this thread.")
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many calls, newest first.")
@json_option
def calls(db_path, session, model, relation, pointer_prefix, verdict, thread, limit, as_json):
    """List captured calls, optionally filtered by their analysis."""
    from ctxscope.inspector.store.analysis_queries import find_calls

    rows = find_calls(open_db_or_fail(db_path), session=session, model=model, relation=relation,
                      pointer_prefix=pointer_prefix, verdict=verdict, thread=thread, limit=limit)  # fmt: skip
    emit_json(rows) if as_json else emit_table(rows, CALL_COLUMNS)


@click.command(context_settings=CONTEXT)
@click.argument("call")
@db_option
@click.option("--request-raw", is_flag=True,
              help="Write the request body to stdout as forwarded, key-like values masked (see --exact).")
@click.option("--response-raw", is_flag=True,
              help="Write the response body to stdout as received, key-like values masked (see --exact).")
@click.option("--exact", is_flag=True,
              help="With --request-raw/--response-raw: the exact bytes, unmasked. They may contain "
                   "secrets the client put in the body (API keys, tokens, passwords).")  # fmt: skip
@json_option
def show(call, db_path, request_raw, response_raw, exact, as_json):
    """Show one call (CALL is an id or a unique prefix of one)."""
    from ctxscope.inspector.store import queries
    from ctxscope.web.bodyexport import export_body

    if exact and not (request_raw or response_raw):
        raise click.UsageError("--exact goes with --request-raw or --response-raw")
    db = open_db_or_fail(db_path)
    row = queries.get_call(db, call)
    if row is None:
        raise click.ClickException(f"no call matches {call!r}")
    if request_raw or response_raw:
        kind = "request" if request_raw else "response"
        body = export_body(db, row["id"], kind, "wire", exact=exact)
        if body is None:
            raise click.ClickException(f"call {row['id']} has no {kind} body stored")
        if body.form == "decoded":
            click.echo(f"note: the {kind} body is compressed ({row.get(kind + '_encoding')}) and holds key-like "
                       "values: written decoded, with them masked (--exact writes the bytes as sent)",
                       err=True)  # fmt: skip
        elif body.masked:
            click.echo(f"note: key-like values in the {kind} body are masked, length for length "
                       "(--exact writes the bytes as sent)", err=True)  # fmt: skip
        sys.stdout.buffer.write(body.data)
        sys.stdout.buffer.flush()
        return
    if as_json:
        row = dict(row)
        row["request"] = queries.get_request_json(db, row["id"])
        row["response"] = queries.get_final_response(db, row["id"])
        emit_json(row)
        return
    for key in ("id", "session", "seq", "started_at", "provider", "api", "model", "method", "path", "status",
                "outcome", "error", "stream", "request_bytes", "response_bytes", "ttfb_ms", "duration_ms"):
        click.echo(f"{key:>15}: {emit_safe(row.get(key))}")
    usage = row.get("usage")
    click.echo(f"{'usage':>15}: {'not reported' if usage is None else usage}")


@click.command(context_settings=CONTEXT)
@db_option
@json_option
def sessions(db_path, as_json):
    """List sessions with their call counts, models, cache hit rate and breaks."""
    from ctxscope.inspector.store.queries import list_sessions

    rows = list_sessions(open_db_or_fail(db_path))
    emit_json(rows) if as_json else emit_table(rows, SESSION_COLUMNS)


@click.group(context_settings=CONTEXT)
def db():
    """The capture database: where it is and how it is doing."""

@db.command("path", context_settings=CONTEXT)
@db_option
def db_path_cmd(db_path):
    """Print the capture database path."""
    click.echo(str(db_path or default_db_path()))

@db.command("status", context_settings=CONTEXT)
@db_option
@json_option
def db_status_cmd(db_path, as_json):
    """Size, counts, storage savings, recorded writer failures, and the running writer's state
    (true from the first failure, even while the database cannot be written)."""
    from ctxscope.inspector.db_status import db_status

    path = db_path or default_db_path()
    status = db_status(path)
    spool = status["spool"]
    if not path.exists() and status["capture"]["state"] == "no writer running" and not (
            spool["files"] or spool["quarantined"]):
        raise click.ClickException(f"no capture database at {path}")
    if as_json:
        emit_json(status)
    else:
        for key, value in status.items():
            line = capture_line(value) if key == "capture" else export_line(value) if key == "export" else value
            click.echo(f"{key:>22}: {line}")


def export_line(lags: list[dict]) -> str:
    """Each OTLP endpoint's lag: calls stored but not sent yet, and since when."""
    if not lags:
        return "no OTLP export"
    return "; ".join(f"{x['target']}: {x['pending']} calls behind"
                     + (f" (oldest from {x['oldest_pending_at']})" if x["pending"] else "")
                     + f", last sent {x['updated_at'] or '-'}" for x in lags)


def capture_line(c: dict) -> str:
    """The running writers' state in one line: storing, or failing since when, how often and why."""
    if c["state"] == "no writer running":
        return "no writer running"
    if c["state"] == "storing":
        return f"storing ({c['stored']} stored since start, {c['waiting']} waiting, {c['failures']} failures)"
    since = f" since {c['since']}" if c.get("since") else ""
    return (f"STORE FAILING{since}: {c['failures']} failures, {c['waiting']} calls waiting; "
            f"last error: {emit_safe(c.get('last_error'))}")


def emit_safe(value) -> str:
    if value is None:
        return "-"
    return "".join(ch if ch.isprintable() else "?" for ch in mask_key_values(str(value)))
