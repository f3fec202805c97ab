"""Handing a capture on: `ctxscope curl`, `ctxscope export` (HAR or bundle) and `ctxscope import`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from ..daemon_address import daemon_address, daemon_option
from ..options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_call, resolve_session_id
from ..output import emit_json

if TYPE_CHECKING:
    import sqlite_utils

T = TypeVar("T")


def _call_or_fail(db: sqlite_utils.Database, call: str) -> dict:
    """The call an id or a unique prefix names (the one id rule: exit 2 with the candidates)."""
    from ctxscope.inspector.store import queries

    row = queries.get_call(db, resolve_call(db, call))
    assert row is not None  # resolved above
    return row


@click.command(context_settings=CONTEXT)
@click.argument("call")
@db_option
@click.option(
    "--via",
    metavar="URL",
    help="Send to this base URL instead of the captured upstream, e.g. the daemon's "
    "http://127.0.0.1:8787/anthropic to record the answer.",
)
@click.option(
    "--api-key-env",
    metavar="NAME",
    help="The environment variable the command reads the key from (default: the provider's, "
    "e.g. ANTHROPIC_API_KEY or OPENAI_API_KEY).",
)
@click.option(
    "--body-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the body to this file and have the command read it (default: a heredoc, or "
    "CALL-request.bin in the current folder for a big or binary body).",
)
@click.option("--exact", is_flag=True, help="Keep key-like values the client put inside the body (masked by default).")
@daemon_option
def curl(
    call: str,
    db_path: Path | None,
    via: str | None,
    api_key_env: str | None,
    body_file: Path | None,
    exact: bool,
    daemon: str | None,
) -> None:
    """Print a runnable curl command that re-sends CALL's request (CALL is an id or a unique prefix).

    The body is the exact bytes sent; the API key is read from the environment, never written.
    """
    from ctxscope.inspector.share.bodies import export_body
    from ctxscope.inspector.share.curl import NoRoute, curl_command, daemon_route, needs_daemon
    from ctxscope.inspector.share.imported import is_imported

    db = open_db_or_fail(db_path)
    row = _call_or_fail(db, call)
    if via is None and needs_daemon(row):  # a file or a child chose its upstream: the daemon's route instead
        try:
            via = daemon_route(row, daemon_address(daemon).url)  # a call only the daemon reaches: named by its route
        except NoRoute as exc:
            raise click.ClickException(f"{exc} (give --via URL to choose where it goes)") from None
        if is_imported(row):
            click.echo(f"note: call {row['id']} was imported: the command goes through the daemon at {via}", err=True)
    body = export_body(db, row["id"], "request", "wire", exact=exact)
    data = body.data if body is not None else b""
    if body is not None and body.masked:
        click.echo("note: key-like values in the body are masked, length for length (--exact keeps them)", err=True)
    cmd = curl_command(
        row,
        data,
        body_decoded=body is not None and body.form == "decoded",
        target=via,
        key_env=api_key_env,
        body_file=str(body_file) if body_file else None,
    )
    if cmd.body_file is not None and data:
        path = Path(cmd.body_file)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        click.echo(f"note: the body ({len(data)} bytes) is in {path}; the command reads it from there", err=True)
    click.echo(cmd.text, nl=False)


def _progress(items: Iterable[T], length: int, label: str, shown: bool | None) -> Iterator[T]:
    """``items`` with their count on stderr (big sessions take a while): a bar on a terminal, or
    with ``shown`` True a line per tenth on a pipe; nothing when ``shown`` is False, or None on a pipe."""
    import sys

    if shown is False or (shown is None and not sys.stderr.isatty()):
        yield from items
        return
    if sys.stderr.isatty():
        with click.progressbar(items, length=length, label=label, file=sys.stderr, show_pos=True) as bar:
            yield from bar
        return
    step = max(1, length // 10)
    for done, item in enumerate(items, 1):
        yield item
        if done % step == 0 or done == length:
            click.echo(f"{label}: {done}/{length}", err=True)


@click.command("export", context_settings=CONTEXT)
@click.argument("session", required=False)
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["har", "bundle", "transcript-md", "transcript-jsonl"]),
    default="har",
    show_default=True,
    help="har: HAR 1.2 (Chrome DevTools, mitmproxy); bundle: ctxscope's own file, raw bytes "
    "plus the analysis, compressed; transcript-md, transcript-jsonl: the conversation at the last "
    "call (`ctxscope transcript`).",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="The file to write (with --format)."
)
@click.option(
    "--otlp",
    "otlp_url",
    metavar="URL",
    help="Instead of a file: send the stored calls (all, or SESSION's) to the OTLP/HTTP collector "
    "at URL as OpenTelemetry spans.",
)
@click.option("--since", default=None, metavar="TIME", help="With --otlp: only calls started at or after TIME (ISO).")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --otlp: a header the collector wants (repeatable).",
)
@click.option("--content", is_flag=True, help="With --otlp: also send prompts and answers (keys masked).")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Calls written so far on stderr (default: on a terminal only, and not with --json).",
)
@daemon_option
@json_option
def export_session(
    session: str | None,
    db_path: Path | None,
    fmt: str,
    output: Path | None,
    otlp_url: str | None,
    since: str | None,
    headers: tuple[str, ...],
    content: bool,
    progress: bool | None,
    daemon: str | None,
    as_json: bool,
) -> None:
    """Write SESSION's calls (an id or a unique prefix) to a file another ctxscope, DevTools or
    mitmproxy can open, or with --otlp URL send stored calls to an OpenTelemetry collector. Keys never
    go in: headers were redacted when captured, and key-like values in the bodies are masked."""
    if otlp_url:
        if output is not None:
            raise click.UsageError("--otlp sends spans to a collector: it writes no file (drop -o)")
        from ..otlp_commands import send_to_otlp

        send_to_otlp(otlp_url, db_path, session, since, headers, content)
        return
    if session is None or output is None:
        raise click.UsageError("give SESSION and -o FILE (or --otlp URL to send spans to a collector)")
    if since or headers or content:
        raise click.UsageError("--since, --header and --content go with --otlp")
    if fmt.startswith("transcript-"):
        from ..transcript_commands import render_transcript

        text, full, turns = render_transcript(db_path, session, None, fmt.removeprefix("transcript-"))
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # captures are private: so is the export
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        result = {"session": full, "turns": turns, "format": fmt, "file": str(output)}
        emit_json(result) if as_json else click.echo(f"exported {turns} turns of {full} to {output} ({fmt})")
        return

    from ctxscope.inspector.share.bundle import write_bundle
    from ctxscope.inspector.share.exchanges import exported_call
    from ctxscope.inspector.share.har_writer import write_har
    from ctxscope.inspector.store.analysis_rows import call_ids
    from ctxscope.vocab.heap import release_heap

    from .. import __version__

    db = open_db_or_fail(db_path)
    full = resolve_session_id(db, session)
    ids = call_ids(db, full)
    calls = (exported_call(db, call_id) for call_id in ids)
    tmp = output.with_name(output.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # captures are private: so is the export
    os.close(fd)
    shown = False if as_json and progress is None else progress

    def drain(written: Iterator[str]) -> None:
        for _ in _progress(written, len(ids), "exporting", shown):
            release_heap()  # a call's buffers back to the system, not kept as a fragmented heap

    try:
        if fmt == "bundle":
            drain(write_bundle(tmp, calls, {"session": full, "calls": len(ids), "ctxscope": __version__}))
        else:  # one entry at a time (share/har_writer.py)
            with open(tmp, "wb") as out:
                drain(write_har(out, calls, __version__, daemon_url=daemon_address(daemon).url))
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    result = {"session": full, "calls": len(ids), "format": fmt, "file": str(output)}
    emit_json(result) if as_json else click.echo(f"exported {len(ids)} call(s) of {full} to {output} ({fmt})")


@click.command("import", context_settings=CONTEXT)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option(
    "--session",
    "label",
    help="Session label for the calls of a HAR that ctxscope did not write (default: import:FILE's name).",
)
@click.option(
    "--max-size",
    "max_size",
    default="256MiB",
    show_default=True,
    metavar="SIZE",
    help="Refuse a file whose decoded content is bigger (a compression bomb stops there).",
)
@json_option
def import_file(file: Path, db_path: Path | None, label: str | None, max_size: str, as_json: bool) -> None:
    """Load a HAR (from ctxscope, mitmproxy or a browser) or a ctxscope bundle into the capture
    database. The calls are stored and analysed as if captured live; a bundle's analysis is
    checked against the new one."""

    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.share.bundle import is_bundle, read_bundle
    from ctxscope.inspector.share.exchanges import BadExport
    from ctxscope.inspector.share.har import load_har, read_har
    from ctxscope.inspector.share.importer import analysis_differences, import_calls
    from ctxscope.inspector.store.queries import open_db
    from ctxscope.inspector.writer.status import capture_state
    from ctxscope.proxy.defence.limits import parse_value

    from ..settings import default_db_path, prices_path

    path = db_path or default_db_path()
    if capture_state(path)["state"] != "no writer running":  # the store has one writer: the daemon's
        raise click.ClickException(
            f"a ctxscope daemon is capturing into {path}: stop it, or import into another database with --db"
        )
    try:
        max_bytes = int(parse_value("max_body_bytes", max_size))  # (a size, read as the limits' sizes are)
    except ValueError:
        raise click.BadParameter(f"{max_size!r} is not a size such as 256MiB", param_hint="--max-size") from None
    expected: dict[str, dict] = {}
    try:
        if is_bundle(file):
            kind = "bundle"
            _, items = read_bundle(file, max_bytes)
            calls: list = []
            for ex, epoch, analysis in items:
                calls.append((ex, epoch))
                expected[ex.id] = analysis
        else:
            kind = "har"
            data = load_har(file, max_bytes)
            calls = list(read_har(data, label or f"import:{file.stem}"))
            for (ex, _), entry in zip(calls, data["log"]["entries"], strict=True):
                ours = entry.get("_ctxscope")
                if isinstance(ours, dict) and isinstance(ours.get("analysis"), dict):
                    expected[ex.id] = ours["analysis"]
    except BadExport as exc:
        raise click.ClickException(f"cannot import {file}: {exc}") from exc
    prices = prices_path()
    analyzers = writer_analyzers(str(prices) if prices else None)
    stored = skipped = failed = 0
    for item in _progress(import_calls(path, calls, analyzers), len(calls), "importing", False if as_json else None):
        stored += item.stored
        skipped += not item.stored
        failed += bool(item.analysis_errors)
    db = open_db(path)
    try:
        differences = analysis_differences(db, expected)
    finally:
        db.close()
    result = {
        "file": str(file),
        "format": kind,
        "db": str(path),
        "calls": len(calls),
        "stored": stored,
        "skipped": skipped,
        "analysis_failed": failed,
        "checked": len(expected),
        "analysis_differences": differences[:50],
        "differences": len(differences),
    }
    if as_json:
        emit_json(result)
        return
    click.echo(
        f"imported {stored} call(s) from {file} ({kind}) into {path}"
        + (f", {skipped} already there" if skipped else "")
        + (f", {failed} whose analysis failed" if failed else "")
    )
    if expected:
        click.echo(f"analysis checked against the file's: {len(differences)} difference(s) in {len(expected)} call(s)")
        for d in differences[:10]:
            click.echo(f"  {d['call']} {d['key']}: expected {d['expected']!r}, got {d['got']!r}")
