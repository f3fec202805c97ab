"""The words people read for the vocabulary's values: one table for the CLI, the web UI and the
filters (docs/architecture.md, "One spelling of each word")."""

from __future__ import annotations

from enum import StrEnum

from .kinds import CacheVerdict, RelationKind

WORDS: dict[type[StrEnum], dict[str, str]] = {
    RelationKind: {
        RelationKind.IDENTICAL: "identical",
        RelationKind.APPEND_ONLY: "append",
        RelationKind.DIVERGED: "diverged",
        RelationKind.NOT_COMPARABLE: "n/c",
        RelationKind.EPOCH_START: "epoch",
    },
    CacheVerdict: {
        CacheVerdict.HIT: "hit",
        CacheVerdict.EXPECTED_WRITE: "write",
        CacheVerdict.CLIENT_BREAK: "break",
        CacheVerdict.MODEL_SWITCH: "switch",
        CacheVerdict.TTL_EXPIRED: "ttl",
        CacheVerdict.BELOW_MINIMUM: "small",
        CacheVerdict.PROVIDER_MISS: "miss",
        CacheVerdict.NOT_REQUESTED: "off",
        CacheVerdict.UNKNOWN: "?",
    },
}


def word(kind: type[StrEnum], value: str | None) -> str | None:
    """The word for a value (the value itself when it has none)."""
    if value is None:
        return None
    return WORDS.get(kind, {}).get(value, value)


def value_of(kind: type[StrEnum], text: str) -> str | None:
    """The value a word or a value names, any case ("append" and "APPEND_ONLY" alike); None if neither."""
    low = text.strip().lower()
    for value in kind:
        if low in (value.value.lower(), WORDS.get(kind, {}).get(value, "").lower()):
            return value.value
    return None


def choices(kind: type[StrEnum]) -> list[str]:
    """What a filter accepts, words first: ["append", "APPEND_ONLY", ...]."""
    words = WORDS.get(kind, {})
    return [w for v in kind for w in dict.fromkeys((words.get(v, v.value), v.value))]
