"""The retry policy: which provider failures are worth another attempt, and how long to wait.

A context overflow is its own error type (``ContextOverflowError``, in ``core.model``) and never
retried as is: only a shorter prompt can fix it, which is the compaction work's job.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from ..core.model import ContextOverflowError, ProviderError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
RETRYABLE_TYPES = frozenset(
    {
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "server_error",
        "rate_limit_exceeded",
        "internal_error",
        "timeout_error",
    }
)
_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|context window|"
    r"input is too long|too many (input )?tokens|exceeds? the (model'?s? )?(context|maximum)|request_too_large",
    re.IGNORECASE,
)


def classify(status: int | None, kind: str | None, message: str, *, retry_after: float | None = None) -> ProviderError:
    """One error from an HTTP status and/or the provider's error type and message."""
    kind = kind or "error"
    text = f"{kind}: {message}" if message else kind
    if status == 413 or (status in (None, 400, 422) and _OVERFLOW.search(f"{kind} {message}")):
        return ContextOverflowError(text, status=status)
    retryable = (status in RETRYABLE_STATUS) or (status is None and kind in RETRYABLE_TYPES)
    return ProviderError(text, status=status, kind=kind, retryable=retryable, retry_after=retry_after)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import time

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter; a server's Retry-After wins when it is not absurd."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Wait before retry number ``attempt`` (1-based)."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_delay)
        backoff = self.base_delay * (2 ** (attempt - 1))
        return min(self.max_delay, backoff * (0.75 + random.random() / 2))
