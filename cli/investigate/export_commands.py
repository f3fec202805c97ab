"""Handing a capture on: `ctxscope curl`, `ctxscope export` (HAR or bundle) and `ctxscope import`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
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


def _read_progress(
    items: Iterable[T], read: Callable[[], tuple[int, int]], label: str, shown: bool | None
) -> Iterator[T]:
    """``items`` with their count and the bytes read so far on stderr, a line per tenth of the file
    (per 64 MiB when its size is not known); shown as ``_progress`` decides."""
    import sys

    if shown is False or (shown is None and not sys.stderr.isatty()):
        yield from items
        return
    done, size, mark = 0, read()[1], 0
    step = max(1 << 20, size // 10) if size else 64 << 20
    for done, item in enumerate(items, 1):
        yield item
        at = read()[0]
        if at >= mark + step:
            mark = at - at % step
            click.echo(f"{label}: {done} entries, {_mib(at)}" + (f" of {_mib(size)}" if size else ""), err=True)
    click.echo(f"{label}: {done} entries, {_mib(read()[0])} read", err=True)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


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
    help="Refuse a bundle whose decoded content is bigger (a compression bomb stops there), and a "
    "call's record (a HAR entry, a bundle line) over a quarter of it. A HAR of any size is read an "
    "entry at a time.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Entries checked and stored so far on stderr (default: on a terminal only, and not with --json).",
)
@json_option
def import_file(
    file: Path, db_path: Path | None, label: str | None, max_size: str, progress: bool | None, as_json: bool
) -> None:
    """Load a HAR (from ctxscope, mitmproxy or a browser) or a ctxscope bundle into the capture
    database. The calls are stored and analysed as if captured live; a bundle's analysis is
    checked against the new one."""

    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.share.exchanges import BadExport
    from ctxscope.inspector.share.import_records import open_records
    from ctxscope.inspector.share.importer import import_records
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
    shown = False if as_json and progress is None else progress
    prices = prices_path()
    analyzers = writer_analyzers(str(prices) if prices else None)
    stored = skipped = failed = 0
    differences: list[dict] = []
    count = checked = 0
    try:
        records = open_records(file, label or f"import:{file.stem}", max_bytes)
        try:
            planned = list(_read_progress(records.scan(), records.progress, "checking", shown))
            items = import_records(path, records, planned, analyzers)
            for item in _progress(items, len(planned), "importing", shown):
                stored += item.stored
                skipped += not item.stored
                failed += bool(item.analysis_errors)
                checked += item.checked
                count += len(item.differences)
                differences.extend(item.differences[: max(0, 50 - len(differences))])
        finally:
            records.close()
    except BadExport as exc:
        raise click.ClickException(f"cannot import {file}: {exc}") from exc
    kind = records.kind
    result = {
        "file": str(file),
        "format": kind,
        "db": str(path),
        "calls": len(planned),
        "stored": stored,
        "skipped": skipped,
        "analysis_failed": failed,
        "checked": checked,
        "analysis_differences": differences,
        "differences": count,
    }
    if as_json:
        emit_json(result)
        return
    click.echo(
        f"imported {stored} call(s) from {file} ({kind}) into {path}"
        + (f", {skipped} already there" if skipped else "")
        + (f", {failed} whose analysis failed" if failed else "")
    )
    if checked:
        click.echo(f"analysis checked against the file's: {count} difference(s) in {checked} call(s)")
        for d in differences[:10]:
            click.echo(f"  {d['call']} {d['key']}: expected {d['expected']!r}, got {d['got']!r}")
