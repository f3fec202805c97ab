"""Keep API keys out of everything we store: redact headers and query parameters, fingerprint keys.

A fingerprint is an HMAC of the key under a per-home random salt, so calls made with different
keys can be told apart without the key (or a plain hash of it) ever being stored.
"""

from __future__ import annotations

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
# The literal starts of those patterns: a value holding none of them cannot match, and most do not.
_KEY_STARTS = ("sk-", "AIza", "xai-", "eyJ")
_SECRET_QUERY = frozenset({"key", "api_key", "apikey", "access_token", "token", "api-key"})


# Verdicts on header names as spelled on the wire, and the values found harmless (never a secret:
# values under secret names are not looked at); clients send the same few on every call.
_name_verdicts: dict[str, bool] = {}
_harmless_values: set[str] = set()
_MAX_REMEMBERED = 4096


def _secret_name(name: str) -> bool:
    verdict = _name_verdicts.get(name)
    if verdict is None:
        lname = name.lower()
        verdict = lname in SECRET_HEADERS or (lname not in _HARMLESS_NAMES and bool(_SECRET_NAME.search(lname)))
        if len(_name_verdicts) < _MAX_REMEMBERED:
            _name_verdicts[name] = verdict
    return verdict


def _looks_like_key(value: str) -> bool:
    if value in _harmless_values:
        return False
    for start in _KEY_STARTS:
        if start in value and _KEY_VALUE.search(value):
            return True
    if len(_harmless_values) < _MAX_REMEMBERED:
        _harmless_values.add(value)
    return False


def is_secret_header(name: str, value: str) -> bool:
    return _secret_name(name) or _looks_like_key(value)


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


# Fingerprints already computed, keyed by Python's hash of (salt, key): an HMAC per call was a few
# percent of the forwarding loop, and a session uses one key. The key itself is not kept: the
# hash is a 64-bit value under this process's random hash seed, so it tells nothing about the key
# (and a collision between two of a user's keys, about 1 in 2**64, would only merge two labels).
_fingerprints: dict[int, str] = {}
_MAX_FINGERPRINTS = 256


def fingerprint(key: str | None, salt: bytes) -> str | None:
    """Salted fingerprint of a key; 16 hex digits are plenty to tell keys apart."""
    if not key:
        return None
    seen = hash((salt, key))
    found = _fingerprints.get(seen)
    if found is None:
        found = hmac.digest(salt, key.encode("utf-8", "surrogateescape"), "sha256").hex()[:16]
        if len(_fingerprints) >= _MAX_FINGERPRINTS:
            _fingerprints.clear()
        _fingerprints[seen] = found
    return found


def redact_headers(headers: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple([(n, REDACTED) if _secret_name(n) or _looks_like_key(v) else (n, v) for n, v in headers])


def redact_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(n.lower() in _SECRET_QUERY or _KEY_VALUE.search(v) for n, v in pairs):
        return query
    return urlencode(
        [(n, REDACTED if n.lower() in _SECRET_QUERY or _KEY_VALUE.search(v) else v) for n, v in pairs]
    )
