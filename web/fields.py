"""The UI's shape of a call row: optional analysis fields normalised, client names, usage cost.

A capture file written before the analysis migrations (or by an older version) lacks the analysis
columns; the UI reads whatever is there and shows a dash for the rest.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctxscope.inspector.analyses.prices import PriceTable, Unpriced, load_prices
from ctxscope.inspector.store.columns import with_defaults

_PRICES: PriceTable | None = None


def prices() -> PriceTable:
    global _PRICES
    if _PRICES is None:
        _PRICES = load_prices()
    return _PRICES


def usage_cost(
    model: str | None,
    inp: int | None,
    out: int | None,
    read: int | None,
    write: int | None,
    *,
    at: str | float | None = None,
    provider: str | None = None,
) -> tuple[float | None, bool, str | None]:
    """USD for reported usage (input counts cache reads and writes) at the rates of ``at``, whether
    the price is the user's own default guess, and why there is no price when there is none."""
    if inp is None and out is None:
        return None, False, None
    table = prices()
    got = table.cost(
        model, {"input": inp, "output": out, "cache_read": read, "cache_write": write}, at, provider=provider
    )
    if isinstance(got, Unpriced):
        return None, False, got.reason
    price = table.lookup(model, at)
    return got, price is not None and price.source == "default", None


_UA_NAMES = (
    (re.compile(r"^claude-cli/([\w.]+)", re.I), "Claude Code"),
    (re.compile(r"^codex[\w-]*/([\w.]+)", re.I), "Codex"),
    (re.compile(r"^ctxscope[\w-]*/([\w.]+)", re.I), "ctxscope agent"),
    (re.compile(r"^pi[\w-]*/([\w.]+)", re.I), "pi"),
    (re.compile(r"^Anthropic/Python ([\w.]+)", re.I), "anthropic-python"),
    (re.compile(r"^Anthropic/JS ([\w.]+)", re.I), "anthropic-js"),
    (re.compile(r"^OpenAI/Python ([\w.]+)", re.I), "openai-python"),
    (re.compile(r"^OpenAI/JS ([\w.]+)", re.I), "openai-js"),
    (re.compile(r"^curl/([\w.]+)", re.I), "curl"),
    (re.compile(r"^python-httpx/([\w.]+)", re.I), "httpx"),
    (re.compile(r"^Python/[\d.]+ aiohttp/([\w.]+)", re.I), "aiohttp"),
)


def client_name(user_agent: str | None) -> str | None:
    """A short client name from a user agent: "Claude Code 1.0.83", "openai-python 1.99.1"."""
    if not user_agent:
        return None
    ua = user_agent.strip()
    for pattern, name in _UA_NAMES:
        m = pattern.search(ua)
        if m:
            return f"{name} {m.group(1)}"
    first = ua.split()[0] if ua.split() else ua
    return first[:60]


ANALYSIS_COLUMNS = (
    "relation",
    "pointer",
    "epoch_reason",
    "predecessor",
    "thread",
    "parent_thread",
    "tokens_estimated",
    "tokens_by_category",
    "cache_verdict",
    "cache",
    "has_compaction_before",
    "markers",
    "relation_detail",
    "session_source",
    "grouped_by",
)


def _json(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


_CATEGORY_ALIASES = {
    "tool_calls": "tool_call",
    "tool_results": "tool_result",
    "reminders": "reminder",
    "images": "image",
}


def normalise_call(row: dict) -> dict:
    """Give the optional analysis fields one shape whatever the store holds (JSON text or objects).

    ``cache`` becomes ``{"verdict", "lost_tokens", "lost_cost_usd", "detail", ...}`` or None: the
    inspector's ``cache`` object when there is one, else built from a bare ``cache_verdict`` and
    its sibling ``cache_*`` columns. Token categories use the inspector's singular names.
    """
    for key in ("tokens_by_category", "markers", "cache", "relation_detail"):
        if key in row:
            row[key] = with_defaults(key, _json(row[key]))
    if not isinstance(row.get("markers"), list):
        row["markers"] = []
    cats = row.get("tokens_by_category")
    if isinstance(cats, dict):
        row["tokens_by_category"] = {_CATEGORY_ALIASES.get(k, k): v for k, v in cats.items()}
    verdict = _json(row.get("cache_verdict"))
    cache = row.get("cache") if isinstance(row.get("cache"), dict) else None
    if cache is not None:
        cache = dict(cache)
        if isinstance(verdict, str) and verdict:
            cache["verdict"] = verdict
    elif isinstance(verdict, dict):
        cache = dict(verdict)
    elif isinstance(verdict, str) and verdict:
        cache = {"verdict": verdict}
        for key, value in row.items():
            if key.startswith("cache_") and key != "cache_verdict" and value is not None:
                cache.setdefault(key[len("cache_") :], _json(value))
        if "lost_usd" in cache:
            cache.setdefault("lost_cost_usd", cache["lost_usd"])
    row["cache"] = cache
    if row.get("has_compaction_before") is not None:
        row["has_compaction_before"] = bool(row["has_compaction_before"])
    return row
