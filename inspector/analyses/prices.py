"""Model prices from pydantic's ``genai-prices`` (a maintained table), under the user's override file.

USD per million tokens. A call is priced at the rates of its own date (the library keeps price
history) and at the tier its prompt size falls in (long-context tiers price every token of the
call at the higher rate, as the providers bill it). The library's bundled snapshot is the only
source: its background updater (``genai_prices.UpdatePrices``) is never started, so nothing is
fetched at run time and the daemon works offline.

The override file is JSON ``{"<model prefix>": {"input": .., "output": .., "cache_read": ..,
"cache_write": .., "cache_write_1h": ..}, ...}`` (``load_prices(path)``). Its entries win over the
library; a key matches the model id as a whole name part, so "gpt-5" finds
"openai/gpt-5-2026-04-01" but not "gpt-5.5". A "default" entry prices every model nobody knows
(the user's own guess, marked ``source="default"``). Without one, an unknown model is unpriced and
``quote`` says why: ctxscope never guesses a price.

One rule for the simulator (docs/architecture.md, "The simulator is free"): its calls are free and never priced,
whatever model they name; ``quote`` says so for a call whose provider is the simulator.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

from ctxscope.vocab.apis import SIMULATOR_PROVIDER

_MISSING = object()
_BOUNDED = r"(?:^|[/.:]){}(?:$|[-@:_\[])"
SIMULATOR_FREE = "simulator calls are free: never priced"


@dataclass(frozen=True)
class Price:
    """One model's rates for one call (its date and tier already chosen)."""

    input: float
    output: float
    cache_read: float
    cache_write: float  # 5-minute write (Anthropic); the input rate where the provider has no surcharge
    cache_write_1h: float | None = None
    source: Literal["genai-prices", "override", "default"] = "genai-prices"

    def write_rate(self, ttl: str | None) -> float:
        return self.cache_write_1h if ttl == "1h" and self.cache_write_1h is not None else self.cache_write


@dataclass(frozen=True)
class Unpriced:
    """Why a call has no price: said wherever its cost would be shown."""

    reason: str


@cache
def prices_source() -> str:
    """The library and version prices come from, as unpriced reasons and legends name it."""
    return f"genai-prices {version('genai-prices')}"


def _when(at: datetime | str | float | None) -> datetime:
    """A call's date in UTC from a datetime, an ISO string or unix seconds; now when unknown."""
    if isinstance(at, datetime):
        return at if at.tzinfo else at.replace(tzinfo=UTC)
    if isinstance(at, int | float):
        return datetime.fromtimestamp(at, UTC)
    if isinstance(at, str):
        try:
            parsed = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            return datetime.now(UTC)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _rate(value: Any, prompt_tokens: int | None) -> float | None:
    """A library rate as a float: a tiered rate at the tier ``prompt_tokens`` reaches (base if unknown)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return float(value)
    rate = value.base
    for tier in value.tiers:
        if prompt_tokens is not None and prompt_tokens > tier.start:
            rate = tier.price
    return float(rate)


def _library_model(model: str) -> Any:
    """The library's ModelInfo for a model id, trying the id without a vendor prefix and as a Bedrock
    id; None when it knows no such model."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    name = model.lower()
    tries: list[tuple[str, str | None]] = [(name, None), (name.rsplit("/", 1)[-1], None)]
    if "anthropic." in name:
        tries.append((name, "aws"))
    for ref, provider in tries:
        try:
            return snapshot.find_provider_model(ref, None, provider, None)[1]
        except LookupError:
            continue
    return None


@dataclass(frozen=True)
class PriceTable:
    """The user's overrides over the library; ``quote`` prices one call."""

    entries: dict[str, Price] = field(default_factory=dict)
    default: Price | None = None
    _models: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def quote(
        self,
        model: str | None,
        at: datetime | str | float | None = None,
        *,
        prompt_tokens: int | None = None,
        provider: str | None = None,
    ) -> Price | Unpriced:
        """The rates for a call of ``model`` made ``at`` with a prompt of ``prompt_tokens``, or why none."""
        if provider == SIMULATOR_PROVIDER:
            return Unpriced(SIMULATOR_FREE)
        override = self._override(model)
        if override is not None:
            return override
        info = self._model(model) if model else None
        if info is None:
            if self.default is not None:
                return self.default
            return Unpriced(f"{model!r} is not in {prices_source()}" if model else "the request names no model")
        rates = info.get_prices(_when(at))
        inp = _rate(rates.input_mtok, prompt_tokens)
        if inp is None:
            return Unpriced(f"{prices_source()} has no token price for {model!r}")
        write = _rate(rates.cache_write_mtok, prompt_tokens)
        return Price(
            input=inp,
            output=_rate(rates.output_mtok, prompt_tokens) or 0.0,
            cache_read=_rate(rates.cache_read_mtok, prompt_tokens) or inp,
            cache_write=write if write is not None else inp,
            cache_write_1h=_rate(rates.cache_write_1h_mtok, prompt_tokens),
        )

    def lookup(
        self,
        model: str | None,
        at: datetime | str | float | None = None,
        *,
        prompt_tokens: int | None = None,
        provider: str | None = None,
    ) -> Price | None:
        """``quote`` without the reason: None when the call is unpriced."""
        got = self.quote(model, at, prompt_tokens=prompt_tokens, provider=provider)
        return got if isinstance(got, Price) else None

    def cost(
        self,
        model: str | None,
        usage: dict | None,
        at: datetime | str | float | None = None,
        *,
        provider: str | None = None,
    ) -> float | Unpriced:
        """USD for a call's reported usage ({input (reads and writes included), output, cache_read,
        cache_write}), at its date's rates and its prompt's tier; or why it has no price."""
        usage = usage or {}
        if usage.get("input") is None and usage.get("output") is None:
            return Unpriced("no usage reported")
        inp, out = usage.get("input") or 0, usage.get("output") or 0
        read, write = usage.get("cache_read") or 0, usage.get("cache_write") or 0
        price = self.quote(model, at, prompt_tokens=inp, provider=provider)
        if isinstance(price, Unpriced):
            return price
        uncached = max(0, inp - read - write)
        return (uncached * price.input + read * price.cache_read + write * price.cache_write + out * price.output) / 1e6

    def _override(self, model: str | None) -> Price | None:
        if not model or not self.entries:
            return None
        name = model.lower()
        keys = [k for k in self.entries if re.search(_BOUNDED.format(re.escape(k)), name)]
        return self.entries[max(keys, key=len)] if keys else None

    def _model(self, model: str) -> Any:
        """The library's model, remembered per model id: a session asks for the same model on every call."""
        known = self._models.get(model, _MISSING)
        if known is _MISSING:
            known = _library_model(model)
            if len(self._models) < 1024:
                self._models[model] = known
        return known


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The library's prices, with the JSON override file at ``path`` over them when given."""
    entries: dict[str, Price] = {}
    default: Price | None = None
    if path is not None:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object of model prefix -> prices")
        for key, row in data.items():
            price = _price(row, key, path)
            if key == "default":
                default = Price(**{f.name: getattr(price, f.name) for f in fields(Price)} | {"source": "default"})
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
