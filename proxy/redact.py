"""Keep API keys out of everything we store: redact headers and query parameters, fingerprint keys.

A fingerprint is an HMAC of the key under a per-home random salt, so calls made with different
keys can be told apart without the key (or a plain hash of it) ever being stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from urllib.parse import parse_qsl, urlencode

REDACTED = "[redacted]"

# Headers whose whole value is a credential.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "openai-api-key",
        "anthropic-api-key",
    }
)
# Header names that smell of a credential even when we do not know them.
_SECRET_NAME = re.compile(r"(key|token|secret|passw|auth|session-?cookie|credential)", re.I)
# Header names that contain those words but carry no secret.
_HARMLESS_NAMES = frozenset(
    {"x-claude-code-session-id", "anthropic-beta", "x-stainless-retry-count", "openai-beta"}
)
# Values that look like a key wherever they appear.
_KEY_VALUE = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|AIza[0-9A-Za-z_\-]{20,}|xai-[A-Za-z0-9]{16,}|eyJ[A-Za-z0-9_\-]{20,}\.)")
_SECRET_QUERY = frozenset({"key", "api_key", "apikey", "access_token", "token", "api-key"})


def is_secret_header(name: str, value: str) -> bool:
    lname = name.lower()
    if lname in SECRET_HEADERS:
        return True
    if lname not in _HARMLESS_NAMES and _SECRET_NAME.search(lname):
        return True
    return bool(_KEY_VALUE.search(value))


def extract_api_key(headers: list[tuple[str, str]], query: str = "") -> str | None:
    """The credential a request carries: x-api-key, Bearer token, api-key, x-goog-api-key or ?key=."""
    found: dict[str, str] = {}
    for name, value in headers:
        found.setdefault(name.lower(), value)
    for name in ("x-api-key", "api-key", "x-goog-api-key"):
        if found.get(name):
            return found[name].strip()
    auth = found.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    if auth:
        return auth.strip()
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name.lower() in _SECRET_QUERY and value:
            return value
    return None


def fingerprint(key: str | None, salt: bytes) -> str | None:
    """Salted fingerprint of a key; 16 hex digits are plenty to tell keys apart."""
    if not key:
        return None
    return hmac.new(salt, key.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:16]


def redact_headers(headers: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((n, REDACTED if is_secret_header(n, v) else v) for n, v in headers)


def redact_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(n.lower() in _SECRET_QUERY or _KEY_VALUE.search(v) for n, v in pairs):
        return query
    return urlencode(
        [(n, REDACTED if n.lower() in _SECRET_QUERY or _KEY_VALUE.search(v) else v) for n, v in pairs]
    )
