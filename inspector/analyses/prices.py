"""A small, dated price table for pricing cache losses; the user can override or extend it.

USD per million tokens. Anthropic rates from platform.claude.com/docs/en/about-claude/pricing;
OpenAI rates from the OpenAI pricing page; both as read on PRICES_AS_OF. Prices change: override
with a JSON file ``{"<model prefix>": {"input": .., "output": .., "cache_read": .., "cache_write":
.., "cache_write_1h": ..}, ...}`` (``load_prices(path)``); entries merge over the built-ins, and a
"default" entry replaces the fallback. Models match by the longest table key contained in the
model id at name boundaries, so dated ids ("claude-sonnet-4-5-20250929") and provider prefixes
("anthropic/...", "us.anthropic....") find their row while "gpt-5.5" does not take "gpt-5"'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

PRICES_AS_OF = "2026-11-30"
# A key matches as a whole name part: "gpt-5" finds "openai/gpt-5-2026-04-01" but not "gpt-5.5".
_MISSING = object()
_BOUNDED = r"(?:^|[/.:]){}(?:$|[-@:_\[])"


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_read: float
    cache_write: float  # 5-minute write (Anthropic) / write surcharge rate (OpenAI: = input)
    cache_write_1h: float | None = None
    source: Literal["builtin", "override", "default"] = "builtin"

    def write_rate(self, ttl: str | None) -> float:
        return self.cache_write_1h if ttl == "1h" and self.cache_write_1h is not None else self.cache_write


def _anthropic(inp: float, out: float, read_factor: float = 0.1) -> Price:
    return Price(inp, out, round(inp * read_factor, 6), inp * 1.25, inp * 2)


BUILTIN: dict[str, Price] = {
    # Anthropic: writes 1.25x (5m) / 2x (1h) input, reads 0.1x.
    "claude-fable-5": _anthropic(10.0, 50.0),
    "claude-fable-5-1": _anthropic(10.0, 50.0, 0.025),
    "claude-opus-5": _anthropic(5.0, 25.0),
    "claude-opus-4-8": _anthropic(5.0, 25.0),
    "claude-opus-4-7": _anthropic(5.0, 25.0),
    "claude-opus-4-6": _anthropic(5.0, 25.0),
    "claude-opus-4-5": _anthropic(5.0, 25.0),
    "claude-opus-4-1": _anthropic(15.0, 75.0),
    "claude-opus-4": _anthropic(15.0, 75.0),
    "claude-opus-5-5": _anthropic(4.0, 20.0, 0.05),
    "claude-sonnet-5-5": _anthropic(2.0, 10.0, 0.05),  # reads cut to 0.05x on 2026-10-07
    "claude-sonnet-5": _anthropic(2.0, 10.0),
    "claude-sonnet-4": _anthropic(3.0, 15.0),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0),
    "claude-haiku-5-5": _anthropic(0.1, 0.5),  # prompts <= 100k tokens; 5x above that
    "claude-haiku-4-5": _anthropic(1.0, 5.0),
    "claude-3-5-haiku": _anthropic(0.8, 4.0),
    # OpenAI: no write surcharge (cache_write = input) on these models.
    "gpt-5": Price(1.25, 10.0, 0.125, 1.25),
    "gpt-5-mini": Price(0.25, 2.0, 0.025, 0.25),
    "gpt-5-nano": Price(0.05, 0.4, 0.005, 0.05),
    "gpt-4.1": Price(2.0, 8.0, 0.5, 2.0),
    "gpt-4.1-mini": Price(0.4, 1.6, 0.1, 0.4),
    "gpt-4o": Price(2.5, 10.0, 1.25, 2.5),
    "gpt-4o-mini": Price(0.15, 0.6, 0.075, 0.15),
}
# Unknown models: a mid-tier guess, marked as such so a UI can say "estimated".
DEFAULT = Price(3.0, 15.0, 0.3, 3.75, 6.0, source="default")


@dataclass(frozen=True)
class PriceTable:
    entries: dict[str, Price]
    default: Price | None = DEFAULT
    _looked_up: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def lookup(self, model: str | None) -> Price | None:
        """The row of the longest key found in ``model`` at name boundaries, else the default.

        Remembered per model name: a session asks for the same model on every call."""
        known = self._looked_up.get(model, _MISSING)
        if known is _MISSING:
            known = self._lookup(model)
            if len(self._looked_up) < 1024:
                self._looked_up[model] = known
        return known

    def _lookup(self, model: str | None) -> Price | None:
        if model:
            name = model.lower()
            keys = [k for k in self.entries if re.search(_BOUNDED.format(re.escape(k)), name)]
            if keys:
                return self.entries[max(keys, key=len)]
        return self.default


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Built-in prices, with the JSON file at ``path`` merged over them when given."""
    entries = dict(BUILTIN)
    default: Price | None = DEFAULT
    if path is not None:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object of model prefix -> prices")
        for key, row in data.items():
            price = _price(row, key, path)
            if key == "default":
                default = price
            else:
                entries[key.lower()] = price
    return PriceTable(entries, default)


def _price(row: object, key: str, path: object) -> Price:
    if not isinstance(row, dict):
        raise ValueError(f"{path}: {key}: expected an object")
    names = {f.name for f in fields(Price)} - {"source"}
    unknown = set(row) - names
    if unknown:
        raise ValueError(f"{path}: {key}: unknown field(s) {sorted(unknown)}")
    try:
        inp = float(row["input"])
        return Price(
            input=inp,
            output=float(row.get("output", inp * 4)),
            cache_read=float(row.get("cache_read", inp * 0.1)),
            cache_write=float(row.get("cache_write", inp)),
            cache_write_1h=float(row["cache_write_1h"]) if row.get("cache_write_1h") is not None else None,
            source="override",
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {key}: needs a numeric 'input' price ({exc})") from None
