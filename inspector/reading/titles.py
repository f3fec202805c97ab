"""A session's title: what a person would call it, read from its first calls' prompts.

For a session the user named (its ``/s/<label>/`` path or label header), that label; else the first
line of the first real user message (not a ``<system-reminder>``, not a tool result) of the
session's earliest call that has one, trimmed to ``TITLE_CHARS``. The earliest calls hold the shortest prompts, so this
reads one small body per session; a title never changes, so each is kept (``_CACHE``) once found
(docs/architecture.md, "The command line").
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import REMINDER_RE
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.vocab.kinds import GroupedBy

TITLE_CHARS = 80
CALLS_TRIED = 3  # a session may open with a token count or a probe that holds no user message
_CACHE: OrderedDict[tuple[str, str], str | None] = OrderedDict()
_CACHE_SIZE = 4096
_LOCK = threading.Lock()


def first_line(text: str) -> str | None:
    """The first non-blank line of ``text`` without its reminder blocks, trimmed to TITLE_CHARS."""
    for line in REMINDER_RE.sub("", text).splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return None


def prompt_title(api: str | None, body: object) -> str | None:
    """The first line of the first real user message of a request body of any API."""
    prompt = canonicalize(api, body)
    if prompt is None:
        return None
    for seg in prompt.segments:
        if seg.kind == "user_text":
            line = first_line(seg.text)
            if line:
                return line
    return None


def session_title(db: Db, session: str) -> str | None:
    """The title of ``session`` (None when none of its first calls holds a user message)."""
    key = (str(getattr(db, "path", "") or id(db)), session)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    calls = queries.list_calls(db, session=session, limit=CALLS_TRIED, newest_first=False)
    title = None
    if calls and calls[0].get("grouped_by") == GroupedBy.LABEL:
        title = first_line(session)  # the user named it: that name is its title
    for call in calls if title is None else ():
        try:
            body = queries.get_request_json(db, call["id"])
        except (KeyError, ValueError):
            continue
        title = prompt_title(call.get("api"), body)
        if title:
            break
    if calls:  # (a session with no call yet may get one: nothing kept)
        with _LOCK:
            _CACHE[key] = title
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return title
