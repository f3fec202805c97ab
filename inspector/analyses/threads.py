"""Sessions, threads and predecessors.

A *session* is what the client calls one session: an explicit id when there is one (path label,
``x-ctxscope-session``, Claude Code's session header or ``metadata.user_id``, a ``session_id``
header, ``prompt_cache_key``), else the thread's own root call. A *thread* is a chain of calls,
each continuing its predecessor's prompt; a session holds a main thread and its side threads
(title generation, sub-agents), which point to the session's main thread (most recent calls)
as their parent.

A call's predecessor is the recent call of the same session (or, without an explicit id, the same
API key) that shares the longest prompt prefix with it. A candidate qualifies when it shares at
least one segment and has the same *thread key* (same system prompt), or shares the start of the
conversation itself (two segments, or one beside a shared tools/system prefix). So a sub-agent
whose tool list happens to start like the main thread's does not attach to it, nor does a side
call that quotes the user's first message, while an edit of the main system prompt keeps its
thread (the messages still match). Ties go to the candidate the call extends (APPEND_ONLY), then
to the latest.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ctxscope.inspector.analyses.canonical import CanonicalPrompt
from ctxscope.inspector.analyses.relation import shared_prefix

SESSION_HEADERS = ("x-ctxscope-session", "x-claude-code-session-id", "session_id", "session-id", "x-session-id")
_SESSION_IN_USER_ID = re.compile(r"session_([0-9A-Za-z][0-9A-Za-z-]{7,})")
_LEADING_AREAS = ("system", "tools")


def explicit_session_id(
    headers: Mapping[str, str],
    body: object,
    session_label: str | None,
    resolve_response: Callable[[str], str | None] | None = None,
) -> tuple[str, str] | None:
    """The client's own session id and where it came from, strongest source first.

    ``headers`` have lowercased names. ``resolve_response`` maps a Responses id to the session of
    the captured call that produced it; a ``previous_response_id`` counts only when it resolves.
    """
    if session_label:
        return session_label, "label"
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value, f"header:{name}"
    if not isinstance(body, dict):
        return None
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id:
        found = _session_from_user_id(user_id)
        if found:
            return found, "metadata.user_id"
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key, "prompt_cache_key"
    prev = body.get("previous_response_id")
    if isinstance(prev, str) and prev and resolve_response is not None:
        session = resolve_response(prev)
        if session:
            return session, "previous_response_id"
    return None


def _session_from_user_id(user_id: str) -> str | None:
    """Claude Code writes ``user_<h>_account_<uuid>_session_<uuid>`` or a JSON object with session_id."""
    if user_id.startswith("{"):
        try:
            data = json.loads(user_id)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("session_id"), str) and data["session_id"]:
            return data["session_id"]
    match = _SESSION_IN_USER_ID.search(user_id)
    return match.group(1) if match else None


def thread_key(prompt: CanonicalPrompt) -> str:
    """Identity of a conversation's "who am I": API plus its leading system segments.

    Tools are left out (they change when an MCP server connects); with no system segment at all
    the tool names stand in, so tool-only agents still separate from each other.
    """
    system = []
    for seg in prompt.segments:
        if seg.kind == "system":
            system.append(seg.hash)
        elif seg.kind != "tools":
            break
    if not system:
        system = ["tools:" + ",".join(s.name or "" for s in prompt.segments if s.kind == "tools")]
    return hashlib.sha256(json.dumps([prompt.api, system]).encode()).hexdigest()[:32]


def _conversation(prompt: CanonicalPrompt) -> Sequence[str]:
    """Hashes of the conversation part: everything after the leading tools and system segments."""
    hashes = prompt.hashes
    i = 0
    while i < len(hashes) and prompt.segments[i].kind in _LEADING_AREAS:
        i += 1
    return hashes[i:]


def choose_predecessor(
    candidate: CanonicalPrompt, recent: Sequence[tuple[str, CanonicalPrompt | None]]
) -> tuple[str | None, int]:
    """(call id, shared segments) of the best predecessor among ``recent`` (oldest first), or (None, 0).

    A call sharing no segment with the new one can still qualify through its conversation (a
    system edit at the very first segment); the shared count is then 0."""
    key, convo = thread_key(candidate), _conversation(candidate)
    best: tuple[int, int, bool, int] | None = None
    best_id = None
    for index, (call_id, prompt) in enumerate(recent):
        if prompt is None or prompt.api != candidate.api:
            continue
        shared = shared_prefix(prompt.hashes, candidate.hashes)
        shared_convo = shared_prefix(_conversation(prompt), convo)
        if thread_key(prompt) == key:
            if not (shared or shared_convo):
                continue
        elif shared_convo < 2 and not (shared and shared_convo):
            continue  # another agent; one equal user message alone (a title call quoting it) is no link
        score = (shared, shared_convo, shared == len(prompt.hashes), index)
        if best is None or score > best:
            best, best_id = score, call_id
    return (best_id, best[0]) if best else (None, 0)


@dataclass(frozen=True)
class RecentCall:
    """A recent call as the store remembers it for placing new calls."""

    call_id: str
    prompt: CanonicalPrompt | None
    session_id: str
    thread_id: str


@dataclass(frozen=True)
class Placement:
    session_id: str
    session_source: str  # explicit source ("label", "header:...", ...) or "inferred"
    thread_id: str  # id of the thread's first call
    parent_thread_id: str | None  # for a new side thread: the session's main thread
    predecessor: str | None
    shared_segments: int


def place_call(
    call_id: str,
    prompt: CanonicalPrompt | None,
    explicit: tuple[str, str] | None,
    recent: Sequence[RecentCall],
    linked: RecentCall | None = None,
) -> Placement:
    """Session, thread and predecessor of a new call.

    ``recent`` are recent calls of the same API key, oldest first; with an explicit session only
    that session's calls are considered. ``linked`` is a captured call named by the body itself
    (the producer of ``previous_response_id``): it is the predecessor whatever the prefix says.
    """
    pool = [r for r in recent if explicit is None or r.session_id == explicit[0]]
    pred, shared = None, 0
    if linked is not None:
        pred = linked
    elif prompt is not None:
        pred_id, shared = choose_predecessor(prompt, [(r.call_id, r.prompt) for r in pool])
        pred = next((r for r in pool if r.call_id == pred_id), None)
    if pred is not None:
        session = explicit or (pred.session_id, "inferred")
        return Placement(session[0], session[1], pred.thread_id, None, pred.call_id, shared)
    parent = _main_thread(pool) if explicit is not None else None
    session = explicit or (call_id, "inferred")
    return Placement(session[0], session[1], call_id, parent, None, 0)


def _main_thread(pool: Sequence[RecentCall]) -> str | None:
    """The session's main thread among recent calls: the one with most calls, the earliest on ties."""
    counts: dict[str, int] = {}
    for r in pool:
        counts[r.thread_id] = counts.get(r.thread_id, 0) + 1
    return max(counts, key=lambda t: counts[t]) if counts else None  # dicts keep first-seen order
