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
_HARMLESS_NAMES = frozenset(
    {"x-claude-code-session-id", "anthropic-beta", "x-stainless-retry-count", "openai-beta"}
)
# Headers whose values are ids, versions, media types or traces, never credentials: only a known key
# format counts there (a multipart boundary or a session id is long and mixed-case, not secret).
_PLAIN_HEADERS = frozenset(
    {
        "accept", "accept-encoding", "accept-language", "anthropic-beta", "anthropic-version", "baggage",
        "cache-control", "connection", "content-encoding", "content-length", "content-type", "date", "host",
        "openai-beta", "openai-organization", "openai-project", "origin", "referer", "sentry-trace",
        "session-id", "session_id", "traceparent", "tracestate", "user-agent", "x-claude-code-session-id",
        "x-request-id", "x-session-id",
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
        "key", "keys", "api_key", "apikey", "api-key", "x-api-key", "access_token", "refresh_token", "id_token",
        "token", "auth", "authorization", "sig", "signature", "secret", "client_secret", "password", "passwd",
        "pwd", "code", "session", "sessionid", "session_id", "jwt", "bearer", "credential", "credentials",
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
    for start in _KEY_STARTS:
        if start in value and _KEY_VALUE.search(value):
            return True
    return False


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


def is_secret_header(name: str, value: str) -> bool:
    return _secret_name(name) or _looks_like_key(value, not _plain_name(name))


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


# ---------------------------------------------------------------------------------------------
# Masking what is shown. Bodies are stored byte-exact, so a key a client put inside one (a JSON
# field such as "api_key", a Bearer token quoted in a tool result) is in the store: every view
# and export masks it on the way out. Text views get "[redacted]"; raw byte views get a mask of
# the same length, so byte offsets and range reads stay true.

# Field names whose string value is a credential (case-insensitive, the whole name). A bare
# "token" is also what OpenAI's logprobs call each generated piece of text, so it is masked only
# when its value looks like a credential (long, no spaces).
_CREDENTIAL_NAME = (
    r"[\w.\-]*?(?:(?:api|access|secret|private|auth)[_\-]?key|secret|password|passwd|"
    r"(?:access|refresh|auth|id|session|bearer)[_\-]?token|authorization|credentials?)|token"
)
_CREDENTIAL_NAME_RE = re.compile(rf"(?:{_CREDENTIAL_NAME})", re.I)
_BARE_TOKEN_MIN = 16
# A JSON string field in JSON text, and the same one level down (JSON text quoted inside a JSON
# string, as tool results and function arguments are), where its quotes are escaped.
_FIELD = rf'"(?P<name>(?i:{_CREDENTIAL_NAME}))"\s*:\s*"(?P<val>(?:[^"\\]|\\.)*)"'
_FIELD_QUOTED = rf'\\"(?P<name>(?i:{_CREDENTIAL_NAME}))\\"\s*:\s*\\"(?P<val>(?:[^"\\]|\\[^"\\]|\\\\(?:[^"\\]|\\.))*)\\"'
# A Bearer token written out in text (a pasted header, a curl line in a tool result).
_BEARER = r"(?i:bearer)\s+(?P<val>(?=[A-Za-z0-9._~+/\-]*[0-9])[A-Za-z0-9._~+/\-]{16,}=*)"
# What a JWT match (which stops at the header's dot) runs on into: payload and signature.
_TOKEN_TAIL = r"[A-Za-z0-9_\-.]*"
# Cheap `in` checks before the expressions run: text holding none of these has no credential
# field (or no Bearer token).
_FIELD_HINTS = ("key", "Key", "KEY", "ecret", "ECRET", "assw", "ASSW", "oken", "OKEN", "uthoriz", "UTHORIZ",
                "redential", "REDENTIAL")  # fmt: skip
_BEARER_HINTS = ("earer", "EARER")


class _Patterns:
    """The masking patterns compiled for str or for bytes (the same expressions: all ASCII)."""

    def __init__(self, kind: type):
        enc = (lambda s: s) if kind is str else (lambda s: s.encode("ascii"))
        self.key = re.compile(enc(_KEY_VALUE.pattern))
        self.tail = re.compile(enc(_TOKEN_TAIL))
        self.field = re.compile(enc(_FIELD))
        self.quoted = re.compile(enc(_FIELD_QUOTED))
        self.bearer = re.compile(enc(_BEARER))
        self.starts = tuple(enc(s) for s in _KEY_STARTS)
        self.field_hints = tuple(enc(s) for s in _FIELD_HINTS)
        self.bearer_hints = tuple(enc(s) for s in _BEARER_HINTS)
        self.dot = enc(".")
        self.escape = enc("\\u")
        self.hexdigits = enc("0123456789abcdefABCDEF")


_STR = _Patterns(str)
_BYTES = _Patterns(bytes)


def _worth_masking(value: str, name: str | bytes) -> bool:
    """A credential field's value to mask: not empty, not already masked, a bare token only if key-like."""
    if not value or value == REDACTED or value.strip("*") == "":
        return False
    if name.lower() in ("token", b"token"):
        return len(value) >= _BARE_TOKEN_MIN and not any(ch.isspace() for ch in value)
    return True


def _key_spans(text, p: _Patterns) -> list[tuple[int, int, int]]:
    """(start, end, kept prefix length) of everything to mask in ``text``, sorted, not merged."""
    spans: list[tuple[int, int, int]] = []
    if any(s in text for s in p.starts):
        for m in p.key.finditer(text):
            start, end = m.span()
            if text[end - 1 : end] == p.dot:
                end = p.tail.match(text, end).end()
            prefix = next((len(s) for s in p.starts if text.startswith(s, start)), 0)
            if _ends_escape(text, start, p):  # "AIza" or "eyJ" right after "\u00d": keep the escape whole
                start, prefix = start + 1, max(0, prefix - 1)
            spans.append((start, end, prefix))
    if any(h in text for h in p.field_hints):
        for pattern in (p.field, p.quoted):
            for m in pattern.finditer(text):
                value = m.group("val")
                if _worth_masking(value.decode("utf-8", "replace") if isinstance(value, bytes) else value, m.group("name")):
                    spans.append((m.start("val"), m.end("val"), 0))
    if any(h in text for h in p.bearer_hints):
        at = 0  # overlapping: a token that runs into a second "Bearer" must not hide the second one
        while (m := p.bearer.search(text, at)) is not None:
            spans.append((m.start("val"), m.end("val"), 0))
            at = m.start("val")
    spans.sort()
    return spans


def _ends_escape(text, start: int, p: _Patterns) -> bool:
    """Whether text[start] is the last hex digit of a JSON "\\uXXXX" escape."""
    return (
        start >= 5
        and text[start - 5 : start - 3] == p.escape
        and all(text[i : i + 1] in p.hexdigits for i in range(start - 3, start + 1))
    )


def _merged(spans: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for start, end, prefix in spans:
        if out and start <= out[-1][1]:
            last = out[-1]
            out[-1] = (last[0], max(last[1], end), last[2])
        else:
            out.append((start, end, prefix))
    return out


def mask_key_values(text: str) -> str:
    """``text`` with key-shaped values, Bearer tokens and credential fields' string values replaced
    by "[redacted]"; JSON text stays valid JSON (only string contents change)."""
    spans = _merged(_key_spans(text, _STR))
    if not spans:
        return text
    parts, at = [], 0
    for start, end, _ in spans:
        parts += [text[at:start], REDACTED]
        at = end
    parts.append(text[at:])
    return "".join(parts)


def mask_key_bytes(data: bytes) -> bytes:
    """The same masking on raw bytes, length for length: each masked byte becomes "*" (a key keeps
    its "sk-"-style start), so offsets into the body still hold and UTF-8 stays valid. ``data``
    itself comes back when there is nothing to mask."""
    spans = _merged(_key_spans(data, _BYTES))
    if not spans:
        return data
    out = bytearray(data)
    for start, end, prefix in spans:
        out[start + prefix : end] = b"*" * (end - start - prefix)
    return bytes(out)


def mask_keys_in(value):
    """A JSON-ready value (dicts, lists, strings, numbers) with every string masked as by
    ``mask_key_values`` and credential-named fields' string values replaced; the input is not
    changed, and parts with nothing to mask are returned as they are."""
    if isinstance(value, str):
        return mask_key_values(value)
    if isinstance(value, dict):
        out, changed = {}, False
        for k, v in value.items():
            nk = mask_key_values(k) if isinstance(k, str) else k
            if isinstance(v, str) and isinstance(k, str) and _CREDENTIAL_NAME_RE.fullmatch(k) and _worth_masking(v, k):
                nv = REDACTED
            else:
                nv = mask_keys_in(v)
            changed = changed or nk is not k or nv is not v
            out[nk] = nv
        return out if changed else value
    if isinstance(value, (list, tuple)):
        items = [mask_keys_in(v) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value
