"""A session's transcript: the conversation as the model saw it at one call, then its answer.

The turns are the call's canonical prompt segments in order (any API: ``analyses/canonical.py``)
followed by the call's final response read the same way, as a list of ``Turn``: ``role``, ``kind``
(text, tool_call, tool_result, reminder, compaction or system), ``text``, ``tool_name`` and
``call_id`` for tools, and ``pointer``, the JSON Pointer into the request (``source`` "request") or
the final response (``source`` "response"). ``<system-reminder>`` blocks inside a user message are
turns of their own; a segment a compaction marker of the session names is a compaction. The CLI
(`ctxscope transcript`, `export --format transcript-md|transcript-jsonl`) and the API
(``/_ctxscope/api/sessions/<id>/transcript``) serve the same turns (docs/architecture.md, "The command line").
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.canonical_prompt import Segment, split_reminders
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.vocab.apis import Api
from ctxscope.vocab.kinds import MarkerKind

KINDS = ("text", "tool_call", "tool_result", "reminder", "compaction", "system")


@dataclass(frozen=True)
class Turn:
    role: str
    kind: str  # one of KINDS
    text: str
    pointer: str
    source: str = "request"  # "request": the prompt; "response": the call's answer
    tool_name: str | None = None
    call_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Transcript:
    session: str
    call: str  # the call whose prompt this is
    seq: int | None
    calls: int  # the session's calls
    api: str | None
    model: str | None
    turns: list[Turn]
    note: str | None = None  # what the prompt cannot show (a server-held history)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "call": self.call,
            "seq": self.seq,
            "calls": self.calls,
            "api": self.api,
            "model": self.model,
            "note": self.note,
            "turns": [t.as_dict() for t in self.turns],
        }


def _arguments(seg: Segment) -> str:
    """A tool call's arguments as compact JSON (the block's input / arguments / args)."""
    try:
        block = json.loads(seg.text)
    except ValueError:
        return seg.text
    if not isinstance(block, dict):
        return seg.text
    fn: dict[str, Any] = block["function"] if isinstance(block.get("function"), dict) else {}
    args = next((v for v in (block.get("input"), fn.get("arguments"), block.get("arguments")) if v is not None), None)
    if args is None and isinstance(block.get("functionCall"), dict):
        args = block["functionCall"].get("args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args
    return json.dumps(args, ensure_ascii=False, separators=(", ", ": ")) if args is not None else ""


def _role(seg: Segment, default: str) -> str:
    role = seg.role or default
    return {"model": "assistant", "developer": "system", "function": "tool"}.get(role, role)


def segment_turns(segments: Any, compactions: set[str], source: str = "request", pointer_of: Any = None) -> list[Turn]:
    """The turns of canonical segments, tool definitions and thinking left out."""
    turns: list[Turn] = []
    names: dict[str, str] = {}  # a tool call's id -> its tool, to name the result
    for seg in segments:
        pointer = pointer_of(seg.pointer) if pointer_of else seg.pointer
        if seg.kind in ("tools", "thinking"):
            continue
        if seg.pointer in compactions and seg.kind not in ("tool_call", "tool_result"):  # (archived: a result)
            turns.append(Turn(_role(seg, "user"), "compaction", seg.text, pointer, source))
        elif seg.kind == "system":
            turns.append(Turn("system", "system", seg.text, pointer, source))
        elif seg.kind == "tool_call":
            if seg.ref and seg.name:
                names[seg.ref] = seg.name
            turns.append(
                Turn(_role(seg, "assistant"), "tool_call", _arguments(seg), pointer, source, seg.name, seg.ref)
            )
        elif seg.kind == "tool_result":
            name = seg.name or (names.get(seg.ref) if seg.ref else None)
            turns.append(Turn(_role(seg, "tool"), "tool_result", seg.text, pointer, source, name, seg.ref))
        elif seg.kind in ("user_text", "reminder"):
            reminders, rest = split_reminders(seg.text)
            turns.extend(Turn(_role(seg, "user"), "reminder", r, pointer, source) for r in reminders)
            if rest.strip():
                turns.append(Turn(_role(seg, "user"), "text", rest.strip("\n"), pointer, source))
        elif seg.kind == "image":
            turns.append(Turn(_role(seg, "user"), "text", "[image]", pointer, source))
        else:
            role = _role(seg, "assistant" if source == "response" else "user")
            turns.append(Turn(role, "text", seg.text, pointer, source))
    return turns


def response_turns(api: str | None, response: Any) -> list[Turn]:
    """The final response's turns: its answer read as an assistant message of the same API."""
    if not isinstance(response, dict):
        return []
    as_request: dict | None = None
    prefix = base = ""  # a pointer into ``as_request`` starts with ``prefix``; into the response, ``base``
    if api == Api.ANTHROPIC_MESSAGES and isinstance(response.get("content"), list):
        as_request, prefix = {"messages": [{"role": "assistant", "content": response["content"]}]}, "/messages/0"
    elif api == Api.OPENAI_CHAT and response.get("choices"):
        choice = response["choices"][0] if isinstance(response["choices"], list) else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            as_request, prefix, base = {"messages": [message]}, "/messages/0", "/choices/0/message"
    elif api == Api.OPENAI_RESPONSES and isinstance(response.get("output"), list):
        as_request, prefix, base = {"input": response["output"]}, "/input", "/output"
    elif api == Api.GEMINI_GENERATE and response.get("candidates"):
        cand = response["candidates"][0] if isinstance(response["candidates"], list) else None
        content = cand.get("content") if isinstance(cand, dict) else None
        if isinstance(content, dict):
            as_request, prefix = {"contents": [dict(content, role="model")]}, "/contents/0"
            base = "/candidates/0/content"
    if as_request is None:
        return []
    prompt = canonicalize(api, as_request)
    if prompt is None:
        return []
    return segment_turns(prompt.segments, set(), "response", lambda p: base + p[len(prefix) :])


def _compaction_pointers(rows: list[dict[str, Any]]) -> set[str]:
    """The pointers compaction markers of ``rows`` name (the summary that replaced the history)."""
    out: set[str] = set()
    for r in rows:
        for m in r.get("markers") or ():
            if isinstance(m, dict) and m.get("kind") == MarkerKind.COMPACTION and isinstance(m.get("pointer"), str):
                out.add(m["pointer"])
    return out


def _epochs(thread_rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The thread's calls cut where a compaction replaced the history (at its first call after)."""
    epochs: list[list[dict[str, Any]]] = []
    for r in thread_rows:
        if not epochs or r.get("has_compaction_before"):
            epochs.append([])
        epochs[-1].append(r)
    return epochs


def _call_turns(db: Db, row: dict[str, Any], epoch: list[dict[str, Any]]) -> tuple[list[Turn], str | None] | None:
    """The turns of one call's prompt and answer (None when its prompt cannot be read)."""
    prompt = canonicalize(row.get("api"), queries.get_request_json(db, row["id"]))
    if prompt is None:
        return None
    turns = segment_turns(prompt.segments, _compaction_pointers(epoch))
    try:
        final = queries.get_final_response(db, row["id"])
    except (KeyError, ValueError):
        final = None
    note = None
    if prompt.previous_response_id:
        note = f"earlier turns are held by the provider (previous_response_id {prompt.previous_response_id})"
    return turns + response_turns(row.get("api"), final), note


def _new_turns(listed: list[Turn], epoch: list[Turn]) -> list[Turn]:
    """The turns of the next epoch that are not listed yet: a compaction may keep part of the history
    (its first turns, its last ones), and the turns kept are listed once, where they first came."""
    have = Counter(_key(t) for t in listed)
    out = []
    for t in epoch:
        if have[_key(t)] > 0 and t.kind != "compaction":
            have[_key(t)] -= 1
        else:
            out.append(t)
    return out


def _key(t: Turn) -> tuple:
    """A tool call or result is known by its id (a result the agent pruned since is the same turn)."""
    if t.call_id and t.kind in ("tool_call", "tool_result"):
        return (t.kind, t.call_id)
    return (t.role if t.source == "request" else "assistant", t.kind, t.text)


def _main_thread(db: Db, session: str) -> str | None:
    tree = queries.session_threads(db, session)
    return tree[0]["thread"] if tree else None


def transcript(db: Db, session: str, at: str | None = None, *, whole: bool = True) -> Transcript | None:
    """``session``'s transcript at call ``at`` (default: the main thread's last call with a prompt
    ctxscope reads); None when there is none. ``at`` must be a call of the session (KeyError).

    ``whole``: the thread's turns before each compaction come first (each epoch as its last call
    saw it), so every turn of the conversation is listed in order, the summaries that replaced them
    marked; without it, only what the model saw at that call."""
    rows = queries.list_calls(db, session=session, limit=None, newest_first=False)
    if not rows:
        return None
    if at is not None:
        target = next((r for r in rows if r["id"] == at), None)
        if target is None:
            raise KeyError(f"call {at} is not in session {session}")
    else:
        main = _main_thread(db, session)
        candidates = [r for r in reversed(rows) if main is None or r.get("thread") == main]
        target = next((r for r in candidates if _call_turns(db, r, []) is not None), None)
        if target is None:
            return None
    thread = target.get("thread")
    same = [r for r in rows if r.get("thread") == thread and (r.get("seq") or 0) <= (target.get("seq") or 0)]
    epochs = _epochs(same) if thread is not None else [[target]]
    turns: list[Turn] = []
    note = None
    for epoch in epochs if whole else epochs[-1:]:
        read = _call_turns(db, epoch[-1], epoch)  # (the last epoch's last call is the target)
        if read is not None:
            turns += _new_turns(turns, read[0])
            note = note or read[1]
    return Transcript(
        session, target["id"], target.get("seq"), len(rows), target.get("api"), target.get("model"), turns, note
    )


def markdown(t: Transcript, title: str | None = None) -> str:
    """The transcript as Markdown: one heading per turn, tool calls and results fenced."""
    lines = [f"# {title or t.session}", ""]
    lines.append(f"Session `{t.session}`, at call `{t.call}` (#{t.seq} of {t.calls}), {t.model or '-'}.")
    if t.note:
        lines += ["", f"> {t.note}"]
    for turn in t.turns:
        head = {
            "text": turn.role.capitalize(),
            "system": "System",
            "reminder": "Reminder",
            "compaction": "Compaction summary",
            "tool_call": f"Tool call: {turn.tool_name or '?'}",
            "tool_result": f"Tool result: {turn.tool_name or turn.call_id or '?'}",
        }[turn.kind]
        if turn.source == "response":
            head += " (the answer)"
        lines += ["", f"## {head}", "", f"<!-- {turn.pointer} -->"]
        if turn.call_id and turn.kind in ("tool_call", "tool_result"):
            lines.append(f"call id `{turn.call_id}`")
        if turn.kind in ("tool_call", "tool_result", "reminder", "compaction"):
            fence = "````" if "```" in turn.text else "```"
            lines += [fence, turn.text, fence]
        else:  # (a heading inside a message must not read as a turn of its own)
            lines += ["", "\n".join("\\" + ln if ln.startswith("#") else ln for ln in turn.text.split("\n"))]
    return "\n".join(lines) + "\n"


def jsonl(t: Transcript) -> str:
    """One JSON object per turn, each with the session and the call it was read at."""
    return "".join(
        json.dumps({"session": t.session, "call": t.call, **turn.as_dict()}, ensure_ascii=False) + "\n"
        for turn in t.turns
    )
