"""Masking what is shown of a stored body.

Bodies are stored byte-exact, so a key a client put inside one (a JSON field such as "api_key", a
Bearer token quoted in a tool result, a credential parameter in a URL) is in the store: every view
and export masks it on the way out (docs/architecture.md, "Secrets"). Text views get "[redacted]";
raw byte views get a mask of the same length, so byte offsets and range reads stay true.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus

from ctxscope.proxy.redaction.redact import _KEY_STARTS, _KEY_VALUE, REDACTED, _secret_query_name

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
# A parameter in a URL written out in text (a logged request line, an upstream echoing its URL):
# masked when its name is credential-like, as the proxy redacts the query it stores.
_QUERY_PARAM = r"[?&](?P<name>[A-Za-z0-9_.\-]+(?:\[\]|%5[Bb]%5[Dd])?)=(?P<val>[^&\s\"'#<>\\]+)"
# What a JWT match (which stops at the header's dot) runs on into: payload and signature.
_TOKEN_TAIL = r"[A-Za-z0-9_\-.]*"
# Cheap `in` checks before the expressions run: text holding none of these has no credential
# field (or no Bearer token).
_FIELD_HINTS = (
    "key",
    "Key",
    "KEY",
    "ecret",
    "ECRET",
    "assw",
    "ASSW",
    "oken",
    "OKEN",
    "uthoriz",
    "UTHORIZ",
    "redential",
    "REDENTIAL",
)
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
        self.query = re.compile(enc(_QUERY_PARAM))
        self.starts = tuple(enc(s) for s in _KEY_STARTS)
        self.field_hints = tuple(enc(s) for s in _FIELD_HINTS)
        self.bearer_hints = tuple(enc(s) for s in _BEARER_HINTS)
        self.query_hints = tuple(enc(s) for s in ("?", "&"))
        self.equals = enc("=")
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


def _key_spans(text: str | bytes, p: _Patterns) -> list[tuple[int, int, int]]:
    """(start, end, kept prefix length) of everything to mask in ``text``, sorted, not merged."""
    spans: list[tuple[int, int, int]] = []
    if any(s in text for s in p.starts):
        for m in p.key.finditer(text):
            start, end = m.span()
            if text[end - 1 : end] == p.dot:
                tail = p.tail.match(text, end)  # a starred class: it always matches, maybe empty
                end = tail.end() if tail else end
            prefix = next((len(s) for s in p.starts if text.startswith(s, start)), 0)
            if _ends_escape(text, start, p):  # "AIza" or "eyJ" right after "\u00d": keep the escape whole
                start, prefix = start + 1, max(0, prefix - 1)
            spans.append((start, end, prefix))
    if any(h in text for h in p.field_hints):
        for pattern in (p.field, p.quoted):
            for m in pattern.finditer(text):
                value = m.group("val")
                if _worth_masking(
                    value.decode("utf-8", "replace") if isinstance(value, bytes) else value, m.group("name")
                ):
                    spans.append((m.start("val"), m.end("val"), 0))
    if any(h in text for h in p.bearer_hints):
        at = 0  # overlapping: a token that runs into a second "Bearer" must not hide the second one
        while (found := p.bearer.search(text, at)) is not None:
            spans.append((found.start("val"), found.end("val"), 0))
            at = found.start("val")
    if p.equals in text and any(h in text for h in p.query_hints):
        for m in p.query.finditer(text):
            name = m.group("name")
            if _secret_query_name(unquote_plus(name.decode("latin-1") if isinstance(name, bytes) else name)):
                spans.append((m.start("val"), m.end("val"), 0))
    spans.sort()
    return spans


def _ends_escape(text: str | bytes, start: int, p: _Patterns) -> bool:
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


def mask_keys_in(value: Any) -> Any:
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
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value
