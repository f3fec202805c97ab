"""`ctxscope transcript`: a session's conversation as the model saw it, to read or paste.

The turns come from ``inspector/reading/transcript.py`` (the same the UI's transcript API serves);
keys are masked before anything is printed or written (docs/architecture.md, "The command line")."""

from __future__ import annotations

from pathlib import Path

import click

from .options import CONTEXT, db_option, open_db_or_fail, resolve_call, resolve_session_id

FORMATS = ("md", "jsonl")


def render_transcript(
    db_path: Path | None, session: str, at: str | None, fmt: str, whole: bool = True
) -> tuple[str, str, int]:
    """(the text, the session's full id, how many turns) of SESSION's transcript in ``fmt``."""
    from ctxscope.inspector.reading.transcript import jsonl, markdown, transcript
    from ctxscope.inspector.store.derived import titles
    from ctxscope.proxy.redaction.mask import mask_key_values

    db = open_db_or_fail(db_path)
    full = resolve_session_id(db, session)
    call = resolve_call(db, at) if at else None
    try:
        found = transcript(db, full, call, whole=whole)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    if found is None:
        raise click.ClickException(f"session {full} has no call with a prompt ctxscope can read")
    text = markdown(found, titles.title(db, full)) if fmt == "md" else jsonl(found)
    return mask_key_values(text), full, len(found.turns)


@click.command(context_settings=CONTEXT)
@click.argument("session")
@db_option
@click.option("--at", "at", metavar="CALL", help="The conversation as it was at this call (default: the last).")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="md", show_default=True, help="Markdown or JSON Lines."
)
@click.option(
    "--as-seen",
    is_flag=True,
    help="Only what the model saw at that call (without the turns a compaction replaced).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file.")
def transcript(
    session: str, db_path: Path | None, at: str | None, fmt: str, as_seen: bool, output: Path | None
) -> None:
    """Print SESSION's conversation as the model saw it at its last call (or --at CALL).

    User and assistant turns, tool calls and their results in order, system-reminders and
    compactions marked, then the call's answer; the turns a compaction replaced come first, as the
    model saw them before it (--as-seen leaves them out). The default call is the main thread's last.
    SESSION and CALL are ids or unique prefixes.
    """
    text, full, turns = render_transcript(db_path, session, at, fmt, whole=not as_seen)
    if output is None:
        click.echo(text, nl=False)
        return
    import os

    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # captures are private: so is this
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    click.echo(f"wrote {turns} turn{'s' * (turns != 1)} of {full} to {output} ({fmt})")
