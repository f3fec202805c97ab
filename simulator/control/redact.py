"""Keep credentials out of the simulator's request log: headers, header values and query parameters.

The simulator is a second implementation beside the proxy and keeps its own rules (it must not
import the proxy). It errs on the side of hiding: a log entry that hides a harmless value costs
nothing, one that shows a key leaks it to whoever reads /_sim/requests.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus

REDACTED = "<redacted>"

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-sim-token",
    }
)
# Words that make a header or query parameter name a credential's, wherever they appear in it.
_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|auth|credential|cookie|signature|session-?id|^sig$", re.I)
# Names with one of those words that carry no secret and that tests and readers rely on.
_HARMLESS_NAMES = frozenset(
    {"x-ctxscope-session", "x-claude-code-session-id", "anthropic-beta", "openai-beta", "x-stainless-retry-count"}
)
# Values shaped like a credential under any name: provider and forge key prefixes, JWTs, auth schemes.
_SECRET_VALUE = re.compile(
    r"(?:\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-]{8,}"
    r"|AIza[0-9A-Za-z_\-]{20,}|xai-[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"
    r"|^(?:Bearer|Basic|Token|Digest)\s+\S{8,})",
)
# A long opaque value (letters and digits mixed, no spaces) is taken for a secret too: 32 characters
# is longer than the ids and versions clients send in headers, shorter than most keys.
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_\-.~]{32,}$")


def secret_name(name: str) -> bool:
    lower = name.lower()
    if lower in SECRET_HEADERS:
        return True
    return lower not in _HARMLESS_NAMES and bool(_SECRET_NAME.search(lower.removesuffix("[]")))


def secret_value(value: str) -> bool:
    if _SECRET_VALUE.search(value):
        return True
    return bool(_OPAQUE.match(value)) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def redacted_headers(headers: Any) -> dict[str, str]:
    """Headers as sent, with every credential-named or credential-shaped value replaced."""
    return {name: REDACTED if secret_name(name) or secret_value(value) else value for name, value in headers.items()}


def redacted_query(query: str) -> str:
    """The query string as sent (still percent-encoded), with credential parameters' values replaced.

    Names are judged decoded (``%6Bey`` is ``key``, ``key%5B%5D`` is ``key[]``); values decoded too."""
    if not query:
        return query
    out = []
    for part in query.split("&"):
        name, sep, value = part.partition("=")
        plain_name, plain_value = unquote_plus(name), unquote_plus(value)
        if secret_name(plain_name) or (plain_value and secret_value(plain_value)):
            out.append(f"{name}{sep or '='}{REDACTED}")
        else:
            out.append(part)
    return "&".join(out)
