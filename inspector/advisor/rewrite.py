"""A request rewritten with another breakpoint placement: what ``advise --verify`` sends.

Pure. Every ``cache_control`` marker of the body (top level, tools, system and message blocks) is
removed, then one is put on each block a placement names by its segment pointer. A string system
prompt or message content becomes the single text block it equals, so it can carry a marker.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def _strip(value: Any) -> None:
    if isinstance(value, dict):
        value.pop("cache_control", None)
        for v in value.values():
            _strip(v)
    elif isinstance(value, list):
        for v in value:
            _strip(v)


def _mark(body: dict, pointer: str, ttl: str) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.strip("/").split("/")]
    parent: Any = body
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    key: Any = int(last) if isinstance(parent, list) else last
    target = parent[key]
    if isinstance(target, str):  # "system": "..." or "content": "...": the one text block it equals
        target = [{"type": "text", "text": target}]
        parent[key] = target
    if isinstance(target, list):
        target = target[-1]
    marker = {"type": "ephemeral", **({"ttl": "1h"} if ttl == "1h" else {})}
    target["cache_control"] = marker


def with_placement(body: dict, breakpoints: Mapping[str, str]) -> dict:
    """``body`` (not changed) with cache markers at exactly ``breakpoints`` (pointer -> "5m"/"1h"), unstreamed."""
    out = copy.deepcopy(body)
    _strip({k: v for k, v in out.items() if k in ("tools", "system", "messages")})
    out.pop("cache_control", None)
    out["stream"] = False
    for pointer, ttl in breakpoints.items():
        _mark(out, pointer, ttl)
    return out
