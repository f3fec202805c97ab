"""``GET /_ctxscope/api/vocabulary``: every word list of ``ctxscope.vocab``, so the page keeps no copy.

The answer maps each ``StrEnum`` of the vocabulary (``RelationKind``, ``EpochReason``,
``CacheVerdict``, ``Outcome``, ``MarkerKind``, ``Api``...) to its members, name -> value, in
definition order: the page lists a filter's options from it and compares values through it. The
enums are found by looking at the vocabulary's modules, so a new one reaches the page unasked.
The words never change while the daemon runs: the body is built once, at import
(docs/architecture.md, "One spelling of each word").
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from enum import StrEnum
from types import ModuleType

from aiohttp import web

import ctxscope.vocab

_SKIP = {"ctxscope.vocab.tokens"}  # the tokenizer: no word lists, and loading it is not free


def _modules() -> list[ModuleType]:
    names = sorted(f"{ctxscope.vocab.__name__}.{m.name}" for m in pkgutil.iter_modules(ctxscope.vocab.__path__))
    return [importlib.import_module(name) for name in names if name not in _SKIP]


def vocabulary() -> dict[str, dict[str, str]]:
    """Each StrEnum defined in ``ctxscope.vocab``, by class name: its members' names and values."""
    found: dict[str, dict[str, str]] = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, StrEnum) and obj.__module__ == module.__name__:
                found[name] = {member.name: member.value for member in obj}
    return found


_BODY = json.dumps(vocabulary(), separators=(",", ":"))


async def vocabulary_handler(request: web.Request) -> web.Response:
    resp = web.Response(text=_BODY, content_type="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return resp
