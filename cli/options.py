"""What several commands share: the context settings, the --db and --json options, opening the database."""

from __future__ import annotations

from pathlib import Path

import click
import sqlite_utils

from .settings import default_db_path

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

db_option = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="CTXSCOPE_DB",
    help="Capture database (default: $CTXSCOPE_HOME/captures.db, i.e. ~/.ctxscope/captures.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")


def open_db_or_fail(db_path: Path | None) -> sqlite_utils.Database:
    """The capture database (--db, else the default), or a clear error when there is none yet."""
    from ctxscope.inspector.store.queries import open_db

    path = db_path or default_db_path()
    if not path.exists():
        raise click.ClickException(f"no capture database at {path} (run `ctxscope serve` first, or pass --db)")
    return open_db(path)
