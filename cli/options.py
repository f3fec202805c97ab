"""What several commands share: the context settings, the --db and --json options, opening the database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .settings import default_db_path

if TYPE_CHECKING:  # the import costs start-up time: the commands import it when they run
    import sqlite_utils

    from ctxscope.inspector.store.db import SegmentReader

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

db_option = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="CTXSCOPE_DB",
    help="Capture database (default: $CTXSCOPE_HOME/captures.db, i.e. ~/.ctxscope/captures.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")


def open_db_or_fail(db_path: Path | None, *, segment_texts: SegmentReader | None = None) -> sqlite_utils.Database:
    """The capture database (--db, else the default), or a clear error when there is none yet;
    ``segment_texts`` for a command that reads search texts back (search, reindex)."""
    from ctxscope.inspector.store.queries import open_db

    path = db_path or default_db_path()
    if not path.exists():
        raise click.ClickException(f"no capture database at {path} (run `ctxscope serve` first, or pass --db)")
    db = open_db(path, segment_texts=segment_texts)
    _name_old_sessions(db)
    return db


def _name_old_sessions(db: sqlite_utils.Database) -> None:
    """A store older than the session titles gets them once, as it is migrated (each session's first
    bodies read once), saying how far it got on a big store."""
    from ctxscope.inspector.pipeline.session_titles import backfill_if_pending

    def progress(named: int, total: int) -> None:
        if total >= 1000 and (named % 1000 < 200 or named == total):
            click.echo(f"naming the sessions stored before titles were kept: {named:,}/{total:,}", err=True)

    backfill_if_pending(db, progress)


class IdError(click.ClickException):
    """An id no call or session has, or a prefix several share: a usage error, so exit code 2
    (docs/architecture.md, "One id rule")."""

    exit_code = 2

    def __init__(self, message: str):  # the candidates are stored labels: no control character reaches stderr
        from ctxscope.proxy.defence.printable import printable

        super().__init__(printable(message, multiline=True))


def pick_id(kind: str, prefix: str, candidates: list[str] | tuple[str, ...], more: bool = False) -> str:
    """The one id that equals ``prefix`` or starts with it; else an IdError listing the candidates."""
    if prefix in candidates:
        return prefix
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise IdError(f"no {kind} matches {prefix!r}")
    listed = "\n".join(f"  {c}" for c in candidates) + ("\n  ..." if more else "")
    raise IdError(f"{kind} id prefix {prefix!r} is ambiguous; it matches:\n{listed}\ngive more characters of the id")


def resolve_call(db: sqlite_utils.Database, prefix: str) -> str:
    """A call's full id from an id or a unique prefix of one (IdError otherwise)."""
    from ctxscope.inspector.store.queries import AmbiguousCallId, resolve_call_id

    try:
        full = resolve_call_id(db, prefix)
    except AmbiguousCallId as exc:
        return pick_id("call", prefix, exc.candidates, exc.more)
    return pick_id("call", prefix, [full] if full else [])


def resolve_session_id(db: sqlite_utils.Database, prefix: str) -> str:
    """A session's full id from an id or a unique prefix of one (IdError otherwise)."""
    from ctxscope.inspector.store.analysis_queries import resolve_session
    from ctxscope.inspector.store.queries import AmbiguousCallId

    try:
        full = resolve_session(db, prefix)
    except AmbiguousCallId as exc:
        return pick_id("session", prefix, exc.candidates, exc.more)
    return pick_id("session", prefix, [full] if full else [])


def resolve_agent_session(home: Path, prefix: str) -> str:
    """An agent session's full id (a folder under HOME/sessions) from an id or a unique prefix (IdError otherwise)."""
    from ctxscope.agent.host.session_store import SessionStore

    ids = sorted(m.id for m in SessionStore(home).list() if m.id.startswith(prefix))
    return pick_id("agent session", prefix, ids[:10], len(ids) > 10)
