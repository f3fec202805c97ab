"""The live export: a thread that sends what the writer has stored to an OTLP/HTTP endpoint.

It reads committed calls from the store in storing order, never the forwarding path's objects,
and moves its position in the database only after the endpoint accepted a batch; a failed batch
is retried after a growing pause (docs/architecture.md, "Export to OpenTelemetry"). A collector
that is down costs a connection attempt per pause and nothing else.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlite_utils
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import export_rows
from ctxscope.inspector.store.queries import get_final_response, get_request_json

from .bounded import BoundedSession
from .settings import CONTENT_BATCH, PROTOCOLS, ExportSettings
from .spans import call_span

log = logging.getLogger("ctxscope.otlp")
# The SDK logs every attempt and retry; while a collector stays down, only our own summary is logged.
_sdk_log = logging.getLogger("opentelemetry.exporter.otlp")


def resource() -> Resource:
    return Resource.create({"service.name": "ctxscope", "host.name": socket.gethostname()})


def batch_size(settings: ExportSettings) -> int:
    return min(settings.batch, CONTENT_BATCH) if settings.content else settings.batch


def make_exporter(settings: ExportSettings) -> OTLPSpanExporter:
    if settings.protocol not in PROTOCOLS:
        raise ValueError(f"OTLP protocol {settings.protocol!r} is not supported (use one of {PROTOCOLS})")
    return OTLPSpanExporter(
        endpoint=settings.endpoint, headers=dict(settings.headers), timeout=settings.timeout_s, session=BoundedSession()
    )


def spans_of(
    db: sqlite_utils.Database, rows: Sequence[dict[str, Any]], res: Resource, content: bool
) -> list[ReadableSpan]:
    """One span per stored call; its bodies are read for the response model and, if asked, the content."""
    spans = []
    for row in rows:
        try:
            response = get_final_response(db, row["id"])
        except (KeyError, ValueError, sqlite3.DatabaseError):
            response = None
        request = None
        if content:
            try:
                request = get_request_json(db, row["id"])
            except (KeyError, sqlite3.DatabaseError):
                request = None
        spans.append(call_span(row, res, response=response, request=request, content=content))
    return spans


# With everything sent, the export sleeps until the daemon's writer stores calls; it still looks this
# often for calls stored by another process (an import), which no wake announces.
IDLE_CHECK_S = 60.0


class OtlpExport:
    """Sends every stored call of ``db_path`` to ``settings.endpoint``, once, in storing order."""

    def __init__(self, db_path: str | Path, settings: ExportSettings) -> None:
        self.db_path = Path(db_path)
        self.settings = settings
        self._exporter = make_exporter(settings)
        self._resource = resource()
        self._stop = threading.Event()
        self._more = threading.Event()  # set by ``wake``: the writer stored calls
        self._thread = threading.Thread(target=self._run, name="ctxscope-otlp-export", daemon=True)
        self.exported = 0
        self.failures = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """New calls are stored: look now rather than at the next idle check."""
        self._more.set()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop now: a request in flight is cut short; what it carried is sent again next start."""
        self._stop.set()
        self._more.set()
        self._exporter.shutdown()  # ends the exporter's own retry waits
        self._thread.join(timeout)

    def _run(self) -> None:
        db: sqlite_utils.Database | None = None
        pause = self.settings.poll_s
        try:
            while not self._stop.is_set():
                try:
                    if db is None:
                        db = store.connect(self.db_path, check_same_thread=False, migrate=False)
                    sent = self._step(db)
                except sqlite3.Error as exc:  # the writer migrates and recovers the store; wait for it
                    self.last_error = f"store: {exc}"
                    if db is not None:
                        db.close()
                    db = None
                    sent = False
                if sent is None:  # the endpoint refused or is down: wait longer each time
                    pause = min(max(pause * 2, self.settings.poll_s), self.settings.retry_max_s)
                    self._stop.wait(pause)
                    continue
                pause = self.settings.poll_s
                if not sent:  # sleep until the writer stores more (docs/architecture.md, "A quiet idle daemon")
                    self._more.wait(IDLE_CHECK_S)
                    self._more.clear()
                    if not self._stop.is_set():
                        self._stop.wait(self.settings.poll_s)  # stored calls come in bursts: gather a few
        finally:
            if db is not None:
                db.close()

    def _step(self, db: sqlite_utils.Database) -> bool | None:
        """Send the next batch: True when one was sent, False when nothing waits, None when it failed."""
        if not export_rows.has_export_tables(db):
            return False
        target = self.settings.endpoint
        at = export_rows.position(db, target)
        if at is None:
            at = 0
            export_rows.set_position(db, target, at)
        batch = export_rows.calls_after(db, at, batch_size(self.settings))
        if not batch:
            return False
        spans = spans_of(db, [row for _seq, row in batch], self._resource, self.settings.content)
        if self._stop.is_set():
            return False
        result = self._exporter.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failures += 1
            if self.failures == 1 or self.failures % 20 == 0:
                log.warning(
                    "OTLP export to %s failed (%d times so far); retrying: nothing is lost", target, self.failures
                )
            _sdk_log.setLevel(logging.CRITICAL)  # the SDK said why the first time
            self.last_error = "export failed"
            return None
        if self.last_error == "export failed":
            log.info("OTLP export to %s works again after %d failures", target, self.failures)
            _sdk_log.setLevel(logging.NOTSET)
        export_rows.set_position(db, target, batch[-1][0])
        self.exported += len(batch)
        self.last_error = None
        return True
