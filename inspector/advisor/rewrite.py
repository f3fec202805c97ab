"""A request rewritten: with another breakpoint placement, or without a cause of cache misses (the
what-if sessions of ``advisor/causes.py``, what ``advise --verify`` sends).

Pure, every function returns a copy. A placement: every ``cache_control`` marker of the body (top
level, tools, system and message blocks) is removed, then one is put on each block a placement
names by its segment pointer; a string system prompt or message content becomes the single text
block it equals, so it can carry a marker. The causes: a value held at another call's value, a
block dropped, the tools in one order, caching options set.
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


def _parts(pointer: str) -> list[str]:
    inner = pointer.strip("/")
    return [p.replace("~1", "/").replace("~0", "~") for p in inner.split("/")] if inner else []


def _step(parent: Any, part: str) -> tuple[Any, Any]:
    """The key of ``part`` in ``parent`` and the value there (KeyError/IndexError/TypeError if absent)."""
    if isinstance(parent, list):
        return int(part), parent[int(part)]
    if isinstance(parent, dict):
        return part, parent[part]
    raise TypeError(part)


def value_at(body: Any, pointer: str) -> Any:
    """The JSON value at ``pointer``; None where it does not resolve."""
    value = body
    try:
        for part in _parts(pointer):
            _, value = _step(value, part)
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value


def held(body: dict, pointer: str, value: Any) -> dict:
    """``body`` with ``value`` at ``pointer`` (unchanged where the pointer's parent does not resolve);
    the block's cache marker, if any, is kept."""
    parts = _parts(pointer)
    out = copy.deepcopy(body)
    parent = value_at(out, "/" + "/".join(parts[:-1])) if parts else None
    if not parts or not isinstance(parent, (dict, list)):
        return out
    try:
        key, old = _step(parent, parts[-1])
    except (KeyError, IndexError, TypeError, ValueError):
        return out
    new = copy.deepcopy(value)
    if isinstance(old, dict) and isinstance(new, dict) and "cache_control" in old:
        new["cache_control"] = old["cache_control"]
    parent[key] = new
    return out


def dropped(body: dict, pointer: str) -> dict:
    """``body`` without the list item at ``pointer``; its cache marker moves to the item before it."""
    parts = _parts(pointer)
    out = copy.deepcopy(body)
    parent = value_at(out, "/" + "/".join(parts[:-1])) if parts else None
    if not isinstance(parent, list) or not parts[-1].isdigit() or int(parts[-1]) >= len(parent):
        return out
    gone = parent.pop(int(parts[-1]))
    marker = gone.get("cache_control") if isinstance(gone, dict) else None
    if marker and int(parts[-1]) > 0 and isinstance(parent[int(parts[-1]) - 1], dict):
        parent[int(parts[-1]) - 1].setdefault("cache_control", marker)
    return out


def tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return ""
    fn = tool.get("function")
    return str(tool.get("name") or (fn.get("name") if isinstance(fn, dict) else "") or "")


def tools_sorted(body: dict) -> dict:
    """``body`` with its tools in one order (by name); a cache marker stays on the last tool."""
    out = copy.deepcopy(body)
    tools = out.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return out
    markers = [t.pop("cache_control") for t in tools if "cache_control" in t]
    tools.sort(key=tool_name)
    if markers and tools:
        tools[-1]["cache_control"] = markers[-1]
    return out


def with_options(body: dict, **options: Any) -> dict:
    """``body`` with ``prompt_cache_options`` fields set (OpenAI)."""
    out = copy.deepcopy(body)
    current = out.get("prompt_cache_options")
    out["prompt_cache_options"] = {**(current if isinstance(current, dict) else {}), **options}
    return out


def _mark(body: dict, pointer: str, ttl: str) -> None:
    parts = _parts(pointer)
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
