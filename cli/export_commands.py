"""Handing a capture on: `ctxscope curl` (more to come: export, import)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .options import CONTEXT, db_option, open_db_or_fail


def _call_or_fail(db, call: str) -> dict:
    from ctxscope.inspector.store import queries

    try:
        row = queries.get_call(db, call)
    except queries.AmbiguousCallId as exc:
        raise click.ClickException(str(exc)) from exc
    if row is None:
        raise click.ClickException(f"no call matches {call!r}")
    return row


@click.command(context_settings=CONTEXT)
@click.argument("call")
@db_option
@click.option("--via", metavar="URL",
              help="Send to this base URL instead of the captured upstream, e.g. the daemon's "
                   "http://127.0.0.1:8787/anthropic to record the answer.")  # fmt: skip
@click.option("--api-key-env", metavar="NAME",
              help="The environment variable the command reads the key from (default: the provider's, "
                   "e.g. ANTHROPIC_API_KEY or OPENAI_API_KEY).")  # fmt: skip
@click.option("--body-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the body to this file and have the command read it (default: a heredoc, or "
                   "CALL-request.bin in the current folder for a big or binary body).")  # fmt: skip
@click.option("--exact", is_flag=True,
              help="Keep key-like values the client put inside the body (masked by default).")
def curl(call, db_path, via, api_key_env, body_file, exact):
    """Print a runnable curl command that re-sends CALL's request (CALL is an id or a unique prefix).

    The body is the exact bytes sent; the API key is read from the environment, never written.
    """
    from ctxscope.inspector.share.bodies import export_body
    from ctxscope.inspector.share.curl import curl_command

    db = open_db_or_fail(db_path)
    row = _call_or_fail(db, call)
    body = export_body(db, row["id"], "request", "wire", exact=exact)
    data = body.data if body is not None else b""
    if body is not None and body.masked:
        click.echo("note: key-like values in the body are masked, length for length (--exact keeps them)", err=True)
    cmd = curl_command(row, data, body_decoded=body is not None and body.form == "decoded", target=via,
                       key_env=api_key_env, body_file=str(body_file) if body_file else None)  # fmt: skip
    if cmd.body_file is not None and data:
        path = Path(cmd.body_file)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        click.echo(f"note: the body ({len(data)} bytes) is in {path}; the command reads it from there", err=True)
    click.echo(cmd.text, nl=False)
