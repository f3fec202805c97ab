"""The capture database as a command: where it is and how it is doing (``ctxscope db``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .options import CONTEXT, db_option, json_option
from .output import emit_fields, emit_json, fmt_int, fmt_rate, plain, safe_text
from .settings import default_db_path


@click.group(context_settings=CONTEXT)
def db() -> None:
    """The capture database: where it is and how it is doing."""


@db.command("path", context_settings=CONTEXT)
@db_option
def db_path_cmd(db_path: Path | None) -> None:
    """Print the capture database path."""
    click.echo(str(db_path or default_db_path()))


@db.command("status", context_settings=CONTEXT)
@db_option
@json_option
def db_status_cmd(db_path: Path | None, as_json: bool) -> None:
    """Size, counts, storage savings, recorded writer failures, and the running writer's state
    (true from the first failure, even while the database cannot be written).

    Exit code 0 with a report; 1, with one line saying so, when there is no database (and no writer
    or spool for it) at that path."""
    from ctxscope.inspector.reading.db_status import db_status

    path = db_path or default_db_path()
    status = db_status(path)
    spool = status["spool"]
    if (
        not path.exists()
        and status["capture"]["state"] == "no writer running"
        and not (spool["files"] or spool["quarantined"])
    ):
        raise click.ClickException(
            f"no capture database at {path}: nothing was captured there yet (start `ctxscope serve`, or pass --db PATH)"
        )
    if as_json:
        emit_json(status)
        return
    emit_fields([(key.replace("_", " "), _status_value(key, value)) for key, value in status.items()])


def _status_value(key: str, value: Any) -> str:
    """One db status entry in words."""
    if key == "capture":
        return capture_line(value)
    if key == "export" and isinstance(value, list):
        return export_line(value)
    if key == "spool" and isinstance(value, dict):
        quarantined = value.get("quarantined") or []
        return (
            f"{fmt_int(value.get('files'))} file(s), {fmt_int(value.get('bytes'))} bytes waiting"
            f" ({fmt_int(value.get('left_by_stopped_writers'))} left by stopped writers)"
            + (f"; {len(quarantined)} quarantined: {plain(quarantined)}" if quarantined else "")
        )
    if key == "blobs" and isinstance(value, dict):
        return (
            f"{fmt_int(value.get('count'))} stored in {fmt_int(value.get('stored_bytes'))} bytes for "
            f"{fmt_int(value.get('content_bytes'))} bytes of content ({fmt_rate(value.get('ratio'))} of it)"
        )
    if key == "writer" and isinstance(value, dict):
        counts = (
            ", ".join(f"{k.replace('_', ' ')} {fmt_int(v)}" for k, v in value.items() if k != "last_error" and v)
            or "no failures recorded"
        )
        last = value.get("last_error")
        return counts + (f"; last error: {safe_text(last)}" if last else "")
    if key == "size_bytes" and isinstance(value, int):
        return f"{fmt_int(value)} bytes"
    if key == "migrations_applied" and isinstance(value, list) and value:
        return f"{len(value)} (the last: {safe_text(value[-1])})"
    if isinstance(value, list):
        return plain(value) if value else "none"
    return plain(value)


def export_line(lags: list[dict]) -> str:
    """Each OTLP endpoint's lag: calls stored but not sent yet, and since when."""
    if not lags:
        return "no OTLP export"
    return "; ".join(
        f"{x['target']}: {x['pending']} calls behind"
        + (f" (oldest from {x['oldest_pending_at']})" if x["pending"] else "")
        + f", last sent {x['updated_at'] or '-'}"
        for x in lags
    )


def capture_line(c: dict) -> str:
    """The running writers' state in one line: storing, or failing since when, how often and why."""
    if c["state"] == "no writer running":
        return "no writer running"
    full = c.get("dropped_spool_full") or 0
    dropped = f"; DROPPED {full} calls: the spool was full (its disk, or max_spool_bytes)" if full else ""
    if c["state"] == "storing":
        asleep = "; idle: its process starts again with the next call" if c.get("asleep") else ""
        return (
            f"storing ({c['stored']} stored since start, {c['waiting']} waiting, {c['failures']} failures)"
            + asleep
            + dropped
        )
    since = f" since {c['since']}" if c.get("since") else ""
    return (
        f"STORE FAILING{since}: {c['failures']} failures, {c['waiting']} calls waiting; "
        f"last error: {emit_safe(c.get('last_error'))}" + dropped
    )


def emit_safe(value: Any) -> str:
    return safe_text(value)
