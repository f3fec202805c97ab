"""Keep credentials out of everything we store: redact headers and query parameters, fingerprint keys.

A header or query parameter is a secret when its name says so (``x-api-key``, ``?auth=``,
``?key[]=``...) or when its value looks like one: a known key format (``sk-``, ``AIza``, GitHub and
GitLab tokens, AWS access key ids, JWTs...) anywhere, or, in a header we do not know, a long token
mixing upper case, lower case and digits (what random keys look like; ids, hashes and dates are
one case). Verdicts on names and on harmless values are remembered, so a client's repeated headers
cost a dictionary lookup; a secret is never remembered.

A fingerprint is an HMAC of the key under a per-home random salt, so calls made with different
keys can be told apart without the key (or a plain hash of it) ever being stored.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_plus

REDACTED = "[redacted]"
_REDACTED_QUERY = "%5Bredacted%5D"

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
_SECRET_NAME = re.compile(r"(key|token|secret|passw|auth|session-?cookie|credential|signature)", re.I)
# Header names that contain those words but carry no secret.
_HARMLESS_NAMES = frozenset({"x-claude-code-session-id", "anthropic-beta", "x-stainless-retry-count", "openai-beta"})
# Headers whose values are ids, versions, media types or traces, never credentials: only a known key
# format counts there (a multipart boundary or a session id is long and mixed-case, not secret).
_PLAIN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "anthropic-beta",
        "anthropic-version",
        "baggage",
        "cache-control",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "date",
        "host",
        "openai-beta",
        "openai-organization",
        "openai-project",
        "origin",
        "referer",
        "sentry-trace",
        "session-id",
        "session_id",
        "traceparent",
        "tracestate",
        "user-agent",
        "x-claude-code-session-id",
        "x-request-id",
        "x-session-id",
    }
)
# Values that look like a key wherever they appear (also used to mask keys in text).
_KEY_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|AIza[0-9A-Za-z_\-]{20,}|xai-[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{17,}\.[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*)?"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}|xox[abposr]-[A-Za-z0-9\-]{10,}|hf_[A-Za-z0-9]{20,}|gsk_[A-Za-z0-9]{20,})"
)
# The literal starts of those patterns: a value holding none of them cannot match, and most do not.
_KEY_STARTS = ("sk-", "AIza", "xai-", "eyJ", "gh", "github_pat_", "glpat-", "AKIA", "ASIA", "xox", "hf_", "gsk_")
# A long run of token characters; it is secret-shaped when it mixes upper, lower case and digits.
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/]{32,}={0,2}")
_UPPER, _LOWER, _DIGIT = re.compile(r"[A-Z]"), re.compile(r"[a-z]"), re.compile(r"[0-9]")

# Query parameter names (lowercased, without a trailing [] or [index]) that carry credentials.
_SECRET_QUERY = frozenset(
    {
        "key",
        "keys",
        "api_key",
        "apikey",
        "api-key",
        "x-api-key",
        "access_token",
        "refresh_token",
        "id_token",
        "token",
        "auth",
        "authorization",
        "sig",
        "signature",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "pwd",
        "code",
        "session",
        "sessionid",
        "session_id",
        "jwt",
        "bearer",
        "credential",
        "credentials",
    }
)
_SECRET_QUERY_NAME = re.compile(r"(token|secret|passw|signature|credential|api[-_]?key|auth|private[-_]?key)", re.I)
# The ones that name an API key (the others, like a signature, do not tell callers apart).
_KEY_QUERY = ("key", "api_key", "apikey", "api-key", "x-api-key")
_ARRAY_SUFFIX = re.compile(r"\[[^\]]*\]$")

# Verdicts on header names as spelled on the wire, and the values found harmless (never a secret:
# values under secret names are not looked at); clients send the same few on every call.
_name_verdicts: dict[str, bool] = {}
_plain_names: dict[str, bool] = {}
_harmless_values: set[str] = set()
_harmless_queries: set[str] = set()
_MAX_REMEMBERED = 4096


def _secret_name(name: str) -> bool:
    verdict = _name_verdicts.get(name)
    if verdict is None:
        lname = name.lower()
        verdict = lname in SECRET_HEADERS or (lname not in _HARMLESS_NAMES and bool(_SECRET_NAME.search(lname)))
        if len(_name_verdicts) < _MAX_REMEMBERED:
            _name_verdicts[name] = verdict
    return verdict


def _plain_name(name: str) -> bool:
    plain = _plain_names.get(name)
    if plain is None:
        lname = name.lower()
        plain = lname in _PLAIN_HEADERS or lname.startswith("x-stainless-")
        if len(_plain_names) < _MAX_REMEMBERED:
            _plain_names[name] = plain
    return plain


def _known_key(value: str) -> bool:
    return any(start in value and _KEY_VALUE.search(value) for start in _KEY_STARTS)


def _secret_shaped(value: str) -> bool:
    """A long token mixing upper case, lower case and digits, as random keys do."""
    for match in _TOKEN.finditer(value):
        token = match.group()
        if _UPPER.search(token) and _LOWER.search(token) and _DIGIT.search(token):
            return True
    return False


def _looks_like_key(value: str, strict: bool = True) -> bool:
    """A known key format anywhere; with ``strict`` also a secret-shaped token (for unknown headers)."""
    if value in _harmless_values:
        return False
    if _known_key(value):
        return True
    if len(value) >= 32 and _secret_shaped(value):
        return strict  # (not remembered: under another name the same value is a secret)
    if len(_harmless_values) < _MAX_REMEMBERED:
        _harmless_values.add(value)
    return False


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
    if query:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if value and _ARRAY_SUFFIX.sub("", name.lower()) in _KEY_QUERY:
                return value
        for name, value in parse_qsl(query, keep_blank_values=True):
            if value and _ARRAY_SUFFIX.sub("", name.lower()) in ("access_token", "token", "auth"):
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
    return tuple(
        [(n, REDACTED) if _secret_name(n) or _looks_like_key(v, not _plain_name(n)) else (n, v) for n, v in headers]
    )


# What a request's headers and query come to, by a hash of (salt, query, headers): a client sends the
# same header set on every call (Content-Length is not among the forwarded ones), so one dictionary
# lookup replaces redacting each header, finding the key and fingerprinting it (a few microseconds
# of every call's loop time). Only redacted values are kept; the key is not, nor a plain hash of it
# (as for ``_fingerprints``: a collision, about 1 in 2**64, would give a call another header set of
# this process, redacted too). (docs/architecture.md, "A request's secrets are worked out once per header set")
_requests: dict[int, RedactedRequest] = {}
_MAX_REQUESTS = 256


@dataclass(frozen=True, slots=True)
class RedactedRequest:
    """A request's headers and query with their secrets removed, its key's fingerprint and user agent."""

    headers: tuple[tuple[str, str], ...]
    query: str
    key_fingerprint: str | None
    user_agent: str | None


def redact_request(headers: list[tuple[str, str]], query: str, salt: bytes) -> RedactedRequest:
    """``redact_headers``, ``redact_query``, the key's ``fingerprint`` and the User-Agent of a request,
    worked out once per distinct header set and query."""
    seen = hash((salt, query, *headers))
    found = _requests.get(seen)
    if found is None:
        found = RedactedRequest(
            redact_headers(headers),
            redact_query(query),
            fingerprint(extract_api_key(headers, query), salt),
            next((v for k, v in headers if k.lower() == "user-agent"), None),
        )
        if len(_requests) >= _MAX_REQUESTS:
            _requests.clear()
        _requests[seen] = found
    return found


def _secret_query_name(name: str) -> bool:
    lname = _ARRAY_SUFFIX.sub("", name.lower())
    return lname in _SECRET_QUERY or bool(_SECRET_QUERY_NAME.search(lname))


def redact_query(query: str) -> str:
    """The query as sent, with the value of every credential-like parameter replaced; the other
    parameters keep their exact encoding."""
    if not query or query in _harmless_queries:
        return query
    pieces = query.split("&")
    changed = False
    for i, piece in enumerate(pieces):
        name, sep, value = piece.partition("=")
        decoded_name, decoded_value = unquote_plus(name), unquote_plus(value)
        if _secret_value(decoded_name):  # a key sent as a bare parameter (or as a name)
            pieces[i], changed = _REDACTED_QUERY + (f"={_REDACTED_QUERY}" if sep else ""), True
        elif decoded_value and (_secret_query_name(decoded_name) or _secret_value(decoded_value)):
            pieces[i], changed = f"{name}={_REDACTED_QUERY}", True
    if not changed:
        if len(_harmless_queries) < _MAX_REMEMBERED:
            _harmless_queries.add(query)
        return query
    return "&".join(pieces)


def _secret_value(text: str) -> bool:
    return _known_key(text) or (len(text) >= 32 and _secret_shaped(text))
