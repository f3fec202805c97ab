"""Sessions, threads and predecessors (docs/architecture.md, "Sessions and threads").

A *session* is what the client calls one session: an explicit id when there is one (path label,
``x-ctxscope-session``, Claude Code's session header or ``metadata.user_id``, a ``session_id``
header, ``prompt_cache_key``, a captured ``previous_response_id``). Without one, the calls of one
API key and client are grouped by lineage: a call joins the session of the call whose prompt it
continues, else (a new thread) the session of that client's latest call if it came shortly
before, else it opens its own. A *thread* is a chain of calls, each continuing its predecessor's
prompt; which thread is a session's main one is decided when the session is read (the store's
``thread_order``), since a title call may come before the agent loop it names.

A call's predecessor is the recent call of the pool that shares the longest prompt prefix with
it. A candidate qualifies when it shares at least one segment and has the same *thread key* (same
system prompt), or shares the start of the conversation itself (two segments, or one beside a
shared tools/system prefix). So a sub-agent whose tool list happens to start like the main
thread's does not attach to it, nor does a side call that quotes the user's first message, while
an edit of the main system prompt keeps its thread (the messages still match). A compaction that
keeps the system/developer prefix and puts a summary next keeps its predecessor, and so does a
conversation that moved to another API. Ties go to the candidate the call extends (APPEND_ONLY),
then to the latest. A call with a system prompt (not an edit of it), tools or model of its own that
shares nothing before the conversation is another agent beside it (Gemini CLI's router classifies
each user turn so): a side thread. Without a session id, lineage holds only from a thread's latest
call within the idle gap, so a script run again (its first prompt an earlier prefix of the first
run's thread) is a thread of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ctxscope.inspector.analyses.canonical_prompt import CanonicalPrompt
from ctxscope.inspector.analyses.markers import is_summary
from ctxscope.inspector.analyses.prompt_metadata import block_of, masked_hash
from ctxscope.inspector.analyses.relation import shared_prefix
from ctxscope.vocab.apis import Api
from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import GroupedBy

SESSION_HEADERS = (Annotation.SESSION.value, "x-claude-code-session-id", "session_id", "session-id", "x-session-id")
_SESSION_IN_USER_ID = re.compile(r"session_([0-9A-Za-z][0-9A-Za-z-]{7,})")
_LEADING_AREAS = ("system", "tools")
IDLE_GAP_S = 15 * 60.0  # without an id or lineage, a client's call after this long opens a new session
COMPACTION_SUMMARY_WITHIN = 2  # a compaction's summary is among the first conversation segments


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
            block = block_of(seg, prompt.api)  # per-request metadata says nothing of who is talking
            system.append(masked_hash(block) if block is not None else seg.hash)
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


def _lead(prompt: CanonicalPrompt) -> int:
    """How many leading tools and system segments the prompt has."""
    return len(prompt.hashes) - len(_conversation(prompt))


def _compacts(cur: CanonicalPrompt, lead: int | None = None) -> bool:
    """``cur`` has a system prefix and a summary right after it: the shape of a compaction, whatever
    its predecessor (which only has to share that prefix). ``lead``: ``_lead(cur)``, when known."""
    lead = _lead(cur) if lead is None else lead
    if lead == 0 or not any(s.kind == "system" for s in cur.segments[:lead]):
        return False
    return any(is_summary(seg) for seg in cur.segments[lead : lead + COMPACTION_SUMMARY_WITHIN])


_SEEN = "_thread_seen"  # where a prompt keeps what ``_seen`` computed of it


def _seen(prompt: CanonicalPrompt) -> tuple[str, int, str | None]:
    """(thread key, how many leading tools and system segments, the first conversation hash or None),
    computed once per prompt and kept on it, as ``functools.cached_property`` keeps a value: a call is
    compared with every recent call of its pool, and those prompts do not change (they are frozen).
    Kept on the prompt, it lives as long as the prompt and no longer, and costs no look-up."""
    found = prompt.__dict__.get(_SEEN)
    if found is None:
        hashes = prompt.hashes
        lead = 0
        while lead < len(hashes) and prompt.segments[lead].kind in _LEADING_AREAS:
            lead += 1
        found = (thread_key(prompt), lead, hashes[lead] if lead < len(hashes) else None)
        prompt.__dict__[_SEEN] = found
    return found


def shared_text(a: CanonicalPrompt, b: CanonicalPrompt) -> int:
    """How many leading segments (tool declarations left out) two prompts share as text and kind.

    Segment hashes include each API's wire shape; this does not, so a conversation that moved from
    Chat Completions to Responses still shows its shared system prompt and turns. It stops at the
    first difference, so an unrelated prompt costs one comparison."""
    left = (s for s in a.segments if s.kind != "tools")
    right = (s for s in b.segments if s.kind != "tools")
    n = 0
    for x, y in zip(left, right, strict=False):  # prompts of any two lengths
        if x.kind != y.kind or x.text != y.text:
            break
        n += 1
    return n


def choose_predecessor(
    candidate: CanonicalPrompt, recent: Sequence[tuple[str, CanonicalPrompt | None]], *, strict: bool = False
) -> tuple[str | None, int]:
    """(call id, shared segments) of the best predecessor among ``recent`` (oldest first), or (None, 0).

    A call sharing no segment with the new one can still qualify through its conversation (a
    system edit at the very first segment); the shared count is then 0. ``strict`` (calls without
    a session id) asks for real lineage: an extension of the candidate, or a divergence behind a
    shared first turn; a shared system prompt alone is no link between two conversations. A
    compaction of a candidate's history qualifies either way. Without a predecessor of the same
    API, one of another API whose text the call continues is taken (an API switch)."""
    # Kept on the prompt: it is a candidate of the next calls' pools.
    key, lead, first = _seen(candidate)
    convo: Sequence[str] | None = None  # its conversation's hashes, sliced once a candidate needs them
    compacts = _compacts(candidate, lead)  # the same for every candidate
    best: tuple[int, int, bool, int] | None = None
    best_id = None
    for index, (call_id, prompt) in enumerate(recent):
        if prompt is None or prompt.api != candidate.api:
            continue
        its_key, its_lead, its_first = _seen(prompt)
        if its_first != first and not compacts and (its_key != key or (strict and its_first is not None)):
            continue  # no shared conversation, so no lineage (the rules below, without comparing prefixes)
        shared = shared_prefix(prompt.hashes, candidate.hashes)
        if convo is None:
            convo = candidate.hashes[lead:]
        shared_convo = shared_prefix(prompt.hashes[its_lead:], convo)
        extends = shared == len(prompt.hashes)
        if compacts and shared >= lead:  # it keeps this one's system prefix, then a summary: a compaction
            pass
        elif its_key == key:
            if not (shared or shared_convo) or (strict and not (shared_convo or extends)):
                continue
        elif shared_convo < 2 and not (shared and shared_convo):
            continue  # another agent; one equal user message alone (a title call quoting it) is no link
        elif not shared and _beside(prompt, candidate):
            continue  # a system prompt, tools and model of its own: a router or classifier beside the loop
        score = (shared, shared_convo, extends, index)
        if best is None or score > best:
            best, best_id = score, call_id
    if best is not None:
        return best_id, best[0]
    return _across_apis(candidate, recent), 0


EDIT_KEEPS = 0.5  # an edited system prompt keeps at least this share of its text around the change


def _system_text(prompt: CanonicalPrompt) -> str:
    return "\n".join(s.text for s in prompt.segments[: _seen(prompt)[1]] if s.kind == "system")


def _system_edit(a: CanonicalPrompt, b: CanonicalPrompt) -> bool:
    """Whether ``b``'s system prompt is an edit of ``a``'s: most of its text kept before and after the change."""
    x, y = _system_text(a), _system_text(b)
    if not x or not y:
        return not x and not y
    head = len(os.path.commonprefix([x, y]))  # noqa: RUF071 (texts, not paths)
    tail = len(os.path.commonprefix([x[head:][::-1], y[head:][::-1]]))  # noqa: RUF071
    return head + tail >= EDIT_KEEPS * min(len(x), len(y))


def _beside(a: CanonicalPrompt, b: CanonicalPrompt) -> bool:
    """Whether ``b`` is another agent's call beside ``a``'s on the same conversation (Gemini CLI's router
    classifies each user turn with its own system prompt, no tools and a small model), not ``a``'s
    conversation with its system prompt edited: the system prompt is another text, and the tools or
    the model differ too."""
    if _system_edit(a, b):
        return False
    tools_a = [s.name for s in a.segments if s.kind == "tools"]
    tools_b = [s.name for s in b.segments if s.kind == "tools"]
    return tools_a != tools_b or a.model != b.model


def _across_apis(candidate: CanonicalPrompt, recent: Sequence[tuple[str, CanonicalPrompt | None]]) -> str | None:
    """The latest call of another API whose text this one continues past its first user turn."""
    first_turn = next(
        (
            i
            for i, s in enumerate(s for s in candidate.segments if s.kind != "tools")
            if s.kind not in ("system", "reminder")
        ),
        None,
    )
    if first_turn is None:
        return None
    best: tuple[int, int] | None = None
    best_id = None
    for index, (call_id, prompt) in enumerate(recent):
        if prompt is None or prompt.api == candidate.api or Api.ANTHROPIC_COUNT_TOKENS in (prompt.api, candidate.api):
            continue  # a token count is never a turn of the conversation
        shared = shared_text(prompt, candidate)
        if shared > first_turn and (best is None or (shared, index) > best):
            best, best_id = (shared, index), call_id
    return best_id


@dataclass(frozen=True)
class RecentCall:
    """A recent call as the store remembers it for placing new calls."""

    call_id: str
    prompt: CanonicalPrompt | None
    session_id: str
    thread_id: str
    time: float | None = None  # unix seconds of its start (the idle-gap rule)


@dataclass(frozen=True)
class Placement:
    session_id: str
    session_source: str  # explicit source ("label", "header:...", ...) or the fallback's ("key", "anon")
    thread_id: str  # id of the thread's first call
    parent_thread_id: str | None  # for a new side thread: the session's main thread
    predecessor: str | None
    shared_segments: int
    grouped_by: GroupedBy = GroupedBy.NEW
    thread_start: bool = False  # a new thread in a session that already had calls


def grouped_by_source(source: str) -> GroupedBy:
    """The ``GroupedBy`` of an explicit session id's source."""
    if source == "label":
        return GroupedBy.LABEL
    if source.startswith("header:"):
        return GroupedBy.HEADER
    if source == "metadata.user_id":
        return GroupedBy.METADATA
    if source == "prompt_cache_key":
        return GroupedBy.PROMPT_CACHE_KEY
    if source.startswith("non_model:"):
        return GroupedBy.NON_MODEL
    return GroupedBy.PREVIOUS_RESPONSE


def place_call(
    call_id: str,
    prompt: CanonicalPrompt | None,
    explicit: tuple[str, str] | None,
    recent: Sequence[RecentCall],
    linked: RecentCall | None = None,
    *,
    fallback: tuple[str, str] = ("anon", "anon"),
    time: float | None = None,
    idle_gap: float = IDLE_GAP_S,
) -> Placement:
    """Session, thread and predecessor of a new call (docs/architecture.md, "Sessions and threads").

    With an explicit session, ``recent`` are that session's recent calls (others are ignored).
    Without one, ``recent`` are the recent calls without an id of the same API key and client,
    oldest first: the call joins the session of the call whose prompt it continues (lineage) when
    that call is its thread's latest and started less than ``idle_gap`` seconds before; else the
    session of the client's latest call when it started less than ``idle_gap`` seconds from
    ``time``, before or after (a new thread there), else it opens a session of its own, named
    ``fallback[0]:<call id>`` (a call that is no readable prompt: ``fallback[0]``). ``linked`` is
    a captured call named by the body itself (the producer of ``previous_response_id``): it is
    the predecessor whatever the prefix says.
    """
    pool = [r for r in recent if explicit is None or r.session_id == explicit[0]]
    pred, shared = None, 0
    if linked is not None:
        pred = linked
    elif prompt is not None:
        pred_id, shared = choose_predecessor(prompt, [(r.call_id, r.prompt) for r in pool], strict=explicit is None)
        pred = next((r for r in pool if r.call_id == pred_id), None)
    if explicit is not None:
        grouped = grouped_by_source(explicit[1])
        if pred is not None:
            return Placement(explicit[0], explicit[1], pred.thread_id, None, pred.call_id, shared, grouped)
        return Placement(explicit[0], explicit[1], call_id, _main_thread(pool), None, 0, grouped, bool(pool))
    if pred is not None and linked is None and not _continues_latest(pred, pool, time, idle_gap):
        pred, shared = None, 0  # an earlier prefix of an older thread, or a thread gone idle: no lineage
    if pred is not None and linked is None and prompt is not None and pred.prompt is not None:
        later = _later_extended(pred, prompt, pool, time, idle_gap)
        if later is not None:
            pred, shared = later, len(later.prompt.hashes) if later.prompt is not None else 0
    if pred is not None:
        return Placement(pred.session_id, fallback[1], pred.thread_id, None, pred.call_id, shared, GroupedBy.LINEAGE)
    latest = max(pool, key=lambda r: r.time or 0.0, default=None)
    # A parallel call that started before the latest one but ended after it (the writer places calls
    # as they end) is as much that client's activity as one that starts after it.
    if latest is not None and time is not None and latest.time is not None and abs(time - latest.time) < idle_gap:
        same = [r for r in pool if r.session_id == latest.session_id]
        return Placement(
            latest.session_id, fallback[1], call_id, _main_thread(same), None, 0, GroupedBy.CLIENT_GAP, True
        )
    if prompt is None:  # nothing to follow a conversation by (not a prompt): the key's catch-all session
        return Placement(fallback[0], fallback[1], call_id, None, None, 0, GroupedBy.NEW)
    return Placement(f"{fallback[0]}:{call_id}", fallback[1], call_id, None, None, 0, GroupedBy.NEW)


def _continues_latest(pred: RecentCall, pool: Sequence[RecentCall], time: float | None, idle_gap: float) -> bool:
    """Lineage without a session id holds only from a thread's latest call, within the idle gap of
    it: a second run of a script repeats its first prompt, which is an earlier prefix of the first
    run's thread, and is no turn of it (docs/architecture.md, "Sessions and threads")."""
    latest = max((r for r in pool if r.thread_id == pred.thread_id), key=lambda r: r.time or 0.0, default=pred)
    if latest.call_id != pred.call_id and (latest.time or 0.0) > (pred.time or 0.0):
        return False
    return time is None or pred.time is None or abs(time - pred.time) < idle_gap


def _later_extended(
    pred: RecentCall, prompt: CanonicalPrompt, pool: Sequence[RecentCall], time: float | None, idle_gap: float
) -> RecentCall | None:
    """A call repeating ``pred`` exactly (a second run re-sending the first run's turn) continues a
    later thread's latest call whose prompt it extends, if there is one: that is the run it belongs to."""
    assert pred.prompt is not None
    if len(pred.prompt.hashes) != len(prompt.hashes) or shared_prefix(pred.prompt.hashes, prompt.hashes) < len(
        prompt.hashes
    ):
        return None
    found = None
    for r in pool:
        if r.prompt is None or r.prompt.api != prompt.api or (r.time or 0.0) <= (pred.time or 0.0):
            continue
        n = len(r.prompt.hashes)
        if (
            n < len(prompt.hashes)
            and shared_prefix(r.prompt.hashes, prompt.hashes) == n
            and _continues_latest(r, pool, time, idle_gap)
            and (found is None or (r.time or 0.0) > (found.time or 0.0))
        ):
            found = r
    return found


def _main_thread(pool: Sequence[RecentCall]) -> str | None:
    """The session's main thread among recent calls: the one with most calls, the earliest on ties."""
    counts: dict[str, int] = {}
    for r in pool:
        counts[r.thread_id] = counts.get(r.thread_id, 0) + 1
    return max(counts, key=lambda t: counts[t]) if counts else None  # dicts keep first-seen order
