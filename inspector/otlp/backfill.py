"""Backfill: send stored calls (all, one session's, or those since a time) to an OTLP endpoint once.

It does not move the live export's position: the same calls sent again carry the same span ids
(docs/architecture.md, "Export to OpenTelemetry").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExportResult

from ctxscope.inspector.store import export_rows
from ctxscope.inspector.store.queries import open_db

from .loop import batch_size, make_exporter, resource, spans_of
from .settings import ExportSettings


class BackfillFailed(RuntimeError):
    """The endpoint refused a batch or could not be reached; ``sent`` calls went before it."""

    def __init__(self, sent: int, endpoint: str) -> None:
        super().__init__(f"the OTLP endpoint {endpoint} did not accept a batch after {sent} calls were sent")
        self.sent = sent


@dataclass(frozen=True)
class BackfillResult:
    total: int  # calls that matched
    sent: int


def backfill(
    db_path: str | Path,
    settings: ExportSettings,
    *,
    session: str | None = None,
    since: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BackfillResult:
    """Send every matching call in id order, ``batch_size(settings)`` at a time; ``progress(sent, total)``
    after each batch. Raises BackfillFailed at the first batch the endpoint does not take."""
    exporter = make_exporter(settings)
    res = resource()
    db = open_db(db_path)
    try:
        total = export_rows.count_for_backfill(db, session=session, since=since)
        sent, after = 0, ""
        while True:
            rows = export_rows.calls_for_backfill(
                db, session=session, since=since, after=after, limit=batch_size(settings)
            )
            if not rows:
                return BackfillResult(total, sent)
            if exporter.export(spans_of(db, rows, res, settings.content)) is not SpanExportResult.SUCCESS:
                raise BackfillFailed(sent, settings.endpoint)
            sent += len(rows)
            after = rows[-1]["id"]
            if progress is not None:
                progress(sent, total)
    finally:
        db.close()
        exporter.shutdown()
