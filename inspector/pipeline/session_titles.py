"""A session's title, taken as its first calls are stored, so no read opens a body to name it.

The rule: for a session the user named (its ``/s/<label>/`` path or label header), that label; else
the first line of the first real user message (not a ``<system-reminder>``, not a tool result) of
the session's earliest call that has one, made printable and trimmed to ``TITLE_CHARS``. Only the
first ``CALLS_TRIED`` calls are looked at: a session may open with a token count or a probe, but
one whose first calls hold no user text stays untitled.

``TitleRecorder`` is the writer's analyzer: it runs after the analysis placed the call, takes the
prompt the analysis prepared (or parses the body it has in hand) and writes one row
(``store/derived/titles.py``). ``retitle`` names sessions again from their stored bodies (after a
``reindex`` moved calls); ``backfill`` names the sessions of a store older than the table, once,
one session at a time, committing as it goes (docs/architecture.md, "Totals per session").
"""

from __future__ import annotations

import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import REMINDER_RE, CanonicalPrompt
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived import titles
from ctxscope.proxy.defence.printable import printable
from ctxscope.vocab.kinds import GroupedBy

log = logging.getLogger("ctxscope.analysis")

TITLE_CHARS = 80
CALLS_TRIED = 3  # a session may open with a token count or a probe that holds no user message
_LINE_LOOKED_AT = TITLE_CHARS * 16  # of a first line of any length (a 1 MB one), only its start is read
SESSIONS_KEPT = 4096  # sessions the writer knows are settled (titled, or tried out)
BACKFILL_BATCH = 200  # sessions named per transaction by the backfill

Progress = Callable[[int, int], None]  # (sessions named so far, sessions to name)


def first_line(text: str) -> str | None:
    """The first non-blank line of ``text`` without its reminder blocks, printable, trimmed to TITLE_CHARS."""
    for line in REMINDER_RE.sub("", text).splitlines():
        line = printable(" ".join(line.strip()[:_LINE_LOOKED_AT].split()))
        if line:
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return None


def prompt_line(prompt: CanonicalPrompt | None) -> str | None:
    """The first line of the first real user message of a canonical prompt."""
    for seg in prompt.segments if prompt is not None else ():
        if seg.kind == "user_text":
            line = first_line(seg.text)
            if line:
                return line
    return None


def prompt_title(api: str | None, body: object) -> str | None:
    """The first line of the first real user message of a request body of any API."""
    return prompt_line(canonicalize(api, body))


def label_title(session: str, grouped_by: str | None) -> str | None:
    """A session the user named is titled by that name."""
    return first_line(session) if grouped_by == GroupedBy.LABEL else None


class TitleRecorder:
    """Writes a session's title as the writer stores its first calls; one per writer (not thread-safe).

    A session once titled (or tried out) is remembered, so its later calls cost a dict look-up, until
    the writer forgets the store's ids (``KnownIds.generation``)."""

    single_write = True  # one INSERT OR REPLACE: it needs no savepoint of its own

    def __init__(self, analysis: object | None = None):
        self.analysis = analysis  # the Analyzer: its ``last`` prompt is this call's, already parsed
        self._settled: OrderedDict[str, None] = OrderedDict()
        self._generation: int | None = None  # of the writer's known ids when the sessions settled

    def __call__(self, db: Db, call: dict[str, Any]) -> None:
        session = call.get("session")
        if not isinstance(session, str):
            return
        # The store's ids were forgotten (a rollback, a deletion, another connection's commit): a
        # settled session's row may be gone with them.
        generation = getattr(call.get("_known"), "generation", None)
        if generation != self._generation or call.get("_redo"):
            self._settled.clear()
            self._generation = generation
        elif session in self._settled:
            return
        found = titles.state(db, session)
        title, tried = found if found is not None else (None, 0)
        if title is None and tried < CALLS_TRIED:
            title = label_title(session, call.get("grouped_by")) or self._line(call)
            tried += 1
            titles.save(db, session, title, tried)
        if title is not None or tried >= CALLS_TRIED:
            self._settled[session] = None
            while len(self._settled) > SESSIONS_KEPT:
                self._settled.popitem(last=False)

    def _line(self, call: dict[str, Any]) -> str | None:
        shared = getattr(self.analysis, "last", None)
        prepared = getattr(shared, "prepared", None)
        if prepared is not None and getattr(shared, "call_id", None) == call.get("id"):
            return prompt_line(prepared.prompt)
        body = call.get("_request_json")
        return prompt_title(call.get("api"), body) if body is not None else None

    def release(self) -> None:
        """Forget the settled sessions (an idle writer): the store tells them again."""
        self._settled.clear()


def from_bodies(db: Db, session: str) -> tuple[str | None, int]:
    """(title, calls tried) of a stored session, from its first calls' bodies, one at a time."""
    calls = titles.first_calls(db, session, CALLS_TRIED)
    if calls and (named := label_title(session, calls[0][2])):
        return named, 1
    for tried, (call_id, api, _grouped) in enumerate(calls, 1):
        try:
            body = queries.get_request_json(db, call_id)
        except (KeyError, ValueError) as e:  # a damaged body names nothing
            log.warning("could not read call %s for its session's title: %s", call_id, e)
            continue
        line = prompt_title(api, body) if body is not None else None
        if line:
            return line, tried
    return None, len(calls)


def retitle(db: Db, sessions: Iterable[str]) -> None:
    """Name ``sessions`` again from their stored calls (a session without calls loses its row), in
    the caller's transaction: after a ``reindex`` may have moved calls between sessions."""
    names = sorted(set(sessions))
    titles.forget(db, names)
    for session in names:
        title, tried = from_bodies(db, session)
        if tried:
            titles.save(db, session, title, tried)


def backfill(db: Db, progress: Progress | None = None) -> int:
    """Name every session stored before the table (m021), then mark the store done; returns how
    many were named. Memory holds one body at a time; each ``BACKFILL_BATCH`` sessions commit, so
    an interrupted backfill resumes where it stopped."""
    if not titles.pending(db):
        return 0
    total, named, after = titles.count_untitled(db), 0, ""
    while True:
        db.execute("BEGIN IMMEDIATE")  # waits (busy timeout) while the writer commits a batch
        try:
            batch = titles.untitled(db, after, BACKFILL_BATCH)
            for session in batch:
                title, tried = from_bodies(db, session)
                titles.save(db, session, title, max(tried, 1))
            if not batch:
                titles.done(db)
            db.execute("COMMIT")
        except BaseException:
            db.rollback()
            raise
        if not batch:
            return named
        named, after = named + len(batch), batch[-1]
        if progress is not None:
            progress(named, total)


def backfill_if_pending(db: Db, progress: Progress | None = None) -> None:
    """``backfill`` where it is due; a store that cannot be written now (read-only, busy past the
    timeout) is named by the next process that opens it."""
    try:
        if titles.pending(db):
            backfill(db, progress)
    except sqlite3.Error as e:
        log.warning("could not name the sessions stored before titles were kept: %s", e)
