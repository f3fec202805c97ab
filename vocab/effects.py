"""Declared effects: the value grammar of the ``x-ctxscope-event`` header, written and read in one place.

Our agent declares what it did to the context before a request (a reminder, a compaction, a
checkpoint ...); the proxy records the header and the inspector turns each effect into a marker
(docs/architecture.md, "Protocols between packages"). One effect is a kind with optional
parameters, ``checkpoint; rung=hall; validation=exact``, or a JSON object with a ``kind`` key;
several on one request are comma-joined, as HTTP joins repeated headers.

``format_effect`` writes what ``parse_effect`` reads back: values reduced to safe characters
(``[A-Za-z0-9_.:/+-]``, at most 64), at most ``MAX_PARAMS`` parameters, ``None`` and empty values
left out, booleans as ``true``/``false``; integers read back as ints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .kinds import MarkerKind

MAX_PARAMS = 8
MAX_VALUE = 64
MAX_RAW = 500  # of an unreadable JSON effect, kept as its marker's ``raw``
_BAD_VALUE = re.compile(r"[^A-Za-z0-9_.:/+-]")
_BAD_KEY = re.compile(r"[^a-z0-9_]")

ParamValue = str | int | bool


@dataclass(frozen=True)
class Effect:
    """One effect to declare: a kind of ours and its parameters (``None`` ones are left out)."""

    kind: MarkerKind
    params: Mapping[str, object] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return format_effect(self.kind, **self.params)


@dataclass(frozen=True)
class ParsedEffect:
    """One declared effect as read back: its kind (a ``MarkerKind`` when ours; another client may
    declare a kind of its own) and its parameters."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _BAD_VALUE.sub("_", str(value))[:MAX_VALUE]


def format_effect(kind: MarkerKind, /, **params: object) -> str:
    """``kind; k=v; ...``: one effect in the header grammar."""
    parts = [kind.value]
    for key, value in params.items():
        if value is None or len(parts) > MAX_PARAMS:
            continue
        text = _value_text(value)
        if text:
            parts.append(f"{_BAD_KEY.sub('_', key)[:32]}={text}")
    return "; ".join(parts)


def _read_value(text: str) -> ParamValue:
    return int(text) if text.lstrip("-").isdigit() and len(text) < 19 else text


def parse_effect(value: str) -> ParsedEffect | None:
    """One effect of a header value; None for an empty one. An unreadable JSON effect is an
    ``ANNOTATION`` whose ``raw`` parameter holds (the start of) its text."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("kind"), str) and data["kind"].strip():
            return ParsedEffect(data["kind"].strip(), {k: v for k, v in data.items() if k != "kind"})
        return ParsedEffect(MarkerKind.ANNOTATION, {"raw": value[:MAX_RAW]})
    kind, *pairs = (p.strip() for p in value.split(";"))
    params: dict[str, ParamValue] = {}
    for pair in pairs:
        if not pair:
            continue
        key, sep, text = pair.partition("=")
        params[key.strip()] = _read_value(text.strip()) if sep else True
    return ParsedEffect(kind or MarkerKind.ANNOTATION, params)


def join_effects(effects: Iterable[str]) -> str:
    """The header value of several formatted effects, each once, in order."""
    return ", ".join(dict.fromkeys(effects))


def split_effects(value: str) -> list[str]:
    """The effects of one header value: a JSON effect is one (its text may hold commas)."""
    return [value] if value.lstrip().startswith("{") else value.split(",")
