"""Provider usage objects normalised to one meaning of "input".

Providers disagree on what their input count means: Anthropic's ``input_tokens`` excludes cache
reads and writes (they are added on top, "additive"), while OpenAI's ``prompt_tokens`` /
``input_tokens`` and Gemini's ``promptTokenCount`` already include cached tokens ("inclusive").
``Usage.input`` is always the TOTAL prompt size, so calls from different providers compare.
A field the provider did not report stays None: "not reported" is not 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from ctxscope.vocab.apis import Api

Semantics = Literal["additive", "inclusive"]
ADDITIVE: Final = "additive"
INCLUSIVE: Final = "inclusive"


@dataclass(frozen=True)
class Usage:
    """Normalised token usage; ``raw`` is the provider's object as reported."""

    input: int | None
    output: int | None
    cache_read: int | None
    cache_write: int | None
    raw: dict
    semantics: Semantics  # how the provider's own input count relates to caching

    @property
    def uncached(self) -> int | None:
        """Prompt tokens neither read from nor written to the cache."""
        if self.input is None:
            return None
        return self.input - (self.cache_read or 0) - (self.cache_write or 0)

    def to_dict(self) -> dict:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


def normalize_usage(api: str | None, raw: dict | None) -> Usage | None:
    """Normalise ``raw`` as reported by ``api`` (an ``Api`` value); None when not reported.

    An unknown api is recognised by the object's field names.
    """
    if not isinstance(raw, dict):
        return None
    shape = _SHAPES.get(api or "") or _guess_shape(raw)
    if shape is None:
        return None
    return shape(raw)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _sub(raw: dict, key: str) -> dict:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _sum(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _anthropic(raw: dict) -> Usage:
    base = _int(raw.get("input_tokens"))
    cache_read = _int(raw.get("cache_read_input_tokens"))
    cache_write = _int(raw.get("cache_creation_input_tokens"))
    if cache_write is None:  # only the 5m/1h split was reported
        split = _sub(raw, "cache_creation")
        cache_write = _sum(_int(split.get("ephemeral_5m_input_tokens")), _int(split.get("ephemeral_1h_input_tokens")))
    total = None if base is None else base + (cache_read or 0) + (cache_write or 0)
    return Usage(total, _int(raw.get("output_tokens")), cache_read, cache_write, raw, ADDITIVE)


def _openai(raw: dict) -> Usage:
    """Chat Completions (prompt_/completion_tokens) and Responses (input_/output_tokens)."""
    total = _int(raw.get("prompt_tokens"))
    if total is None:
        total = _int(raw.get("input_tokens"))
    output = _int(raw.get("completion_tokens"))
    if output is None:
        output = _int(raw.get("output_tokens"))
    details = _sub(raw, "prompt_tokens_details") or _sub(raw, "input_tokens_details")
    cache_read = _int(details.get("cached_tokens"))
    if cache_read is None:  # DeepSeek-style compatible servers
        cache_read = _int(raw.get("prompt_cache_hit_tokens"))
    cache_write = _int(details.get("cache_write_tokens"))
    if cache_write is None:
        cache_write = _int(raw.get("cache_write_tokens"))
    return Usage(total, output, cache_read, cache_write, raw, INCLUSIVE)


def _gemini(raw: dict) -> Usage:
    # Thinking tokens are billed as output but not counted in candidatesTokenCount.
    output = _sum(_int(raw.get("candidatesTokenCount")), _int(raw.get("thoughtsTokenCount")))
    return Usage(
        _int(raw.get("promptTokenCount")),
        output,
        _int(raw.get("cachedContentTokenCount")),
        None,
        raw,
        INCLUSIVE,
    )


_SHAPES: dict[str, Callable[[dict], Usage]] = {
    Api.ANTHROPIC_MESSAGES: _anthropic,
    Api.ANTHROPIC_COUNT_TOKENS: _anthropic,
    Api.OPENAI_CHAT: _openai,
    Api.OPENAI_RESPONSES: _openai,
    Api.GEMINI_GENERATE: _gemini,
}


def _guess_shape(raw: dict) -> Callable[[dict], Usage] | None:
    if "promptTokenCount" in raw or "candidatesTokenCount" in raw:
        return _gemini
    if "cache_read_input_tokens" in raw or "cache_creation_input_tokens" in raw:
        return _anthropic
    if "prompt_tokens" in raw or "input_tokens_details" in raw:
        return _openai
    if "input_tokens" in raw or "output_tokens" in raw:
        # Without cache fields both readings agree; "additive" is the Anthropic default.
        return _anthropic
    return None
