"""`ctxscope export --otlp URL`: send stored calls to an OTLP/HTTP collector, with a progress bar."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from .settings import default_db_path


def _since(text: str | None) -> str | None:
    """An ISO date or time (UTC unless it says otherwise) as the store's fixed-width timestamp text."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO date or time (e.g. 2026-12-01T09:00)", param_hint="--since"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def send_to_otlp(
    url: str, db_path: Path | None, session: str | None, since: str | None, headers: tuple[str, ...], content: bool
) -> None:
    """Send stored calls to the OTLP/HTTP collector at URL as OpenTelemetry spans (span ids come
    from call ids: a call sent twice is the same span)."""
    from ctxscope.inspector.otlp.backfill import BackfillFailed, backfill
    from ctxscope.inspector.otlp.settings import ExportSettings, traces_url

    path = db_path or default_db_path()
    if not path.exists():
        raise click.ClickException(f"no capture database at {path} (run `ctxscope serve` first, or pass --db)")
    try:
        endpoint = traces_url(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--otlp") from None
    pairs = {}
    for text in headers:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{text!r} is not NAME=VALUE", param_hint="--header")
        pairs[name.strip()] = value
    settings = ExportSettings(endpoint, headers=pairs, content=content)
    with click.progressbar(length=1, label="exporting", show_pos=True) as bar:

        def progress(sent: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(sent - bar.pos)

        try:
            result = backfill(path, settings, session=session, since=_since(since), progress=progress)
        except BackfillFailed as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"sent {result.sent} of {result.total} calls to {endpoint}")
