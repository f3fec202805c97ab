"""Where and how to export: the `[export]` table and `serve --otlp-endpoint`, without loading the SDK."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

PROTOCOLS = ("http/protobuf",)
CONTENT_BATCH = 20  # calls per request when their content goes too: a request stays a few MB


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a collector's base URL (``http://host:4318``) or the full URL."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http(s) OTLP endpoint: {endpoint!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/traces"):
        path += "/v1/traces"
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass(frozen=True)
class ExportSettings:
    """Where to export and how; from `[export]` in the config file or `serve --otlp-endpoint`."""

    endpoint: str  # the OTLP/HTTP traces URL (``traces_url``)
    headers: dict[str, str] = field(default_factory=dict)  # e.g. an API key the backend wants
    protocol: str = "http/protobuf"
    content: bool = False  # prompts and answers as span events (keys masked)
    batch: int = 200  # calls per request (content on: at most CONTENT_BATCH)
    poll_s: float = 1.0  # pause when everything stored has been sent
    retry_max_s: float = 30.0  # longest pause after failures (doubling from poll_s)
    timeout_s: float = 10.0  # one request, its own retries included
