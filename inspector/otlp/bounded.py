"""The exporter's HTTP session, which reads at most ``MAX_ANSWER_BYTES`` of a collector's answer.

The SDK's OTLP/HTTP exporter posts through ``requests`` without ``stream=True``, so the whole
answer is read into memory before its status is looked at: a collector (or whatever answers at its
address) that says 400 with a 300 MB body grew the daemon by as much. The export only needs the
status and a few words of the reason, so this session streams every answer, keeps its first
64 KiB as the body the SDK may read and drops the connection with the rest unread
(docs/architecture.md, "Export to OpenTelemetry").
"""

from __future__ import annotations

from typing import Any

import requests

MAX_ANSWER_BYTES = 64 * 1024


class BoundedSession(requests.Session):
    """A requests session whose answers hold at most ``MAX_ANSWER_BYTES`` of body."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]  # types-requests spells out each keyword; all pass through
        kwargs["stream"] = True
        response = super().request(method, url, *args, **kwargs)
        try:
            head = response.raw.read(MAX_ANSWER_BYTES, decode_content=True) or b""
        except Exception:  # (urllib3 and requests errors alike) a body that breaks: the status is enough
            head = b""
        finally:
            response.close()  # the rest stays unread: the connection is dropped, not reused
        response._content = bytes(head[:MAX_ANSWER_BYTES])
        response._content_consumed = True
        return response
