"""``GET /_ctxscope/api/vocabulary``: every word list of ``ctxscope.vocab``, so the page keeps no copy.

The answer maps each ``StrEnum`` of the vocabulary (``RelationKind``, ``EpochReason``,
``CacheVerdict``, ``Outcome``, ``MarkerKind``, ``Api``...) to its members, name -> value, in
definition order: the page lists a filter's options from it and compares values through it. Every
``StrEnum`` of the modules named here is served (tests/browser/test_web_vocabulary.py checks that no
module of the vocabulary is missing from them). Under ``"words"`` it serves the words people read
for some of those values (``ctxscope.vocab.words``: ``APPEND_ONLY`` -> "append"), by enum name then
value, so the badges and the filters print the CLI's words from the one table. Under
``"sentences"`` it serves the one-line explanations the page shows as tooltips, from the modules
of ``ctxscope.vocab.figures`` (how a lost dollar is priced, what the prompt row counts).
The words never change while the daemon runs: the body is built once, at import
(docs/architecture.md, "One spelling of each word").
"""

from __future__ import annotations

import json
from enum import StrEnum

from aiohttp import web

from ctxscope.vocab import apis, headers, kinds
from ctxscope.vocab.figures import LOSS_PRICING, PROMPT_TOKENS
from ctxscope.vocab.words import WORDS

MODULES = (apis, headers, kinds)  # the vocabulary's modules that hold word lists (tokens holds none)


def vocabulary() -> dict[str, dict[str, str]]:
    """Each StrEnum defined in ``ctxscope.vocab``, by class name: its members' names and values."""
    found: dict[str, dict[str, str]] = {}
    for module in MODULES:
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, StrEnum) and obj.__module__ == module.__name__:
                found[name] = {member.name: member.value for member in obj}
    return found


def words() -> dict[str, dict[str, str]]:
    """The display words, by enum name: value -> word (the CLI's table, ``ctxscope.vocab.words``)."""
    return {kind.__name__: {str(value): word for value, word in table.items()} for kind, table in WORDS.items()}


def sentences() -> dict[str, str]:
    """Tooltips that state a definition, from the module that defines it."""
    return {"loss_pricing": LOSS_PRICING, "prompt_tokens": PROMPT_TOKENS}


_BODY = json.dumps({**vocabulary(), "words": words(), "sentences": sentences()}, separators=(",", ":"))


async def vocabulary_handler(request: web.Request) -> web.Response:
    resp = web.Response(text=_BODY, content_type="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return resp
