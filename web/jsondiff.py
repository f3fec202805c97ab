"""A structural diff of two request bodies, for the "diff with predecessor" view.

Walks the prompt in the order the provider caches it (tools, system/instructions, then messages
or input) so the first change listed is the first difference that matters for the cache; other
top-level keys (max_tokens, stream, temperature, ...) are listed apart as parameters. Two things
that do not change the prompt are set aside rather than reported as changes: ``cache_control``
markers (their moves are listed separately) and a message content sent as a plain string versus
the same text as a single text block. Arrays are aligned with difflib on element hashes, so an
inserted message shows as one insertion, not as every later message changed. Every pointer is an
RFC 6901 pointer into the *new* body (``old_pointer`` into the old one).

The answer carries the changed region, never both bodies: a changed text is cut to the changed run
with ``CONTEXT_CHARS`` of identical text either side (``head_chars`` / ``tail_chars`` say how much
identical text was left out; the page fetches it by pointer when asked), a run or another value is
capped, and once ``BUDGET_CHARS`` of text are in the answer the later changes carry their
pointers and sizes only (``deferred``: the page asks for that one change when it is selected).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

from jsonpointer import escape

MAX_CHANGES = 300
CONTEXT_CHARS = 300  # identical text kept either side of a changed run
CHANGE_CHARS = 8_000  # of a changed run (or a value shown as JSON), each side
BUDGET_CHARS = 200_000  # of text in one answer, all changes together
MARKER_KEYS = ("cache_control",)
PROMPT_ORDER = ("tools", "system", "instructions", "messages", "input", "contents", "systemInstruction")
_MISSING = object()


def _strip(value: Any) -> Any:
    """The value without cache markers, a lone text block folded to its string."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in MARKER_KEYS}
    if isinstance(value, list):
        items = [_strip(v) for v in value]
        if (
            len(items) == 1
            and isinstance(items[0], dict)
            and set(items[0]) == {"type", "text"}
            and items[0]["type"] == "text"
        ):
            return items[0]["text"]
        return items
    return value


def _hash(value: Any) -> str:
    text = json.dumps(_strip(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()


def _lone_text(value: Any) -> str | None:
    """The text of ``[{"type": "text", "text": s, cache_control?}]``, else None."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        block = {k: v for k, v in value[0].items() if k not in MARKER_KEYS}
        if set(block) == {"type", "text"} and block["type"] == "text" and isinstance(block["text"], str):
            return block["text"]
    return None


def _render(value: Any) -> str | None:
    """Display text of a value (strings as they are, the rest as indented JSON)."""
    if value is _MISSING:
        return None
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def _common_prefix(a: str, b: str) -> int:
    n, i, step = min(len(a), len(b)), 0, 4096
    while i < n and a[i : i + step] == b[i : i + step]:
        i += step
    if i >= n:
        return n
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str, prefix: int) -> int:
    limit = min(len(a), len(b)) - prefix
    ra, rb = a[len(a) - limit :][::-1], b[len(b) - limit :][::-1]
    return _common_prefix(ra, rb)


def window(old: str | None, new: str | None) -> dict:
    """The changed region of two texts: the changed run with a little identical text either side."""
    if old is None or new is None:
        head = tail = 0
    else:
        prefix = _common_prefix(old, new)
        suffix = _common_suffix(old, new, prefix)
        head, tail = max(0, prefix - CONTEXT_CHARS), max(0, suffix - CONTEXT_CHARS)
    cap = CHANGE_CHARS + 2 * CONTEXT_CHARS
    old_w = None if old is None else old[head : len(old) - tail]
    new_w = None if new is None else new[head : len(new) - tail]
    truncated = any(w is not None and len(w) > cap for w in (old_w, new_w))
    return {
        "old": None if old_w is None else old_w[:cap],
        "new": None if new_w is None else new_w[:cap],
        "head_chars": head,
        "tail_chars": tail,
        "old_chars": None if old is None else len(old),
        "new_chars": None if new is None else len(new),
        "truncated": truncated,
    }


def _area(pointer: str) -> str:
    return pointer.split("/")[1] if pointer.count("/") >= 1 and pointer != "" else ""


class _Walker:
    def __init__(self, budget: int | None = BUDGET_CHARS) -> None:
        self.changes: list[dict] = []
        self.truncated = False
        self.budget = budget

    def add(self, op: str, pointer: str, old_pointer: str | None, old: Any, new: Any) -> None:
        if len(self.changes) >= MAX_CHANGES:
            self.truncated = True
            return
        region = window(_render(old), _render(new))
        sent = len(region["old"] or "") + len(region["new"] or "")
        deferred = self.budget is not None and sent > self.budget
        if deferred:
            region["old"] = region["new"] = None
        elif self.budget is not None:
            self.budget -= sent
        self.changes.append(
            {
                "op": op,
                "pointer": pointer,
                "old_pointer": old_pointer,
                "area": _area(pointer),
                **region,
                "old_is_text": isinstance(old, str),
                "new_is_text": isinstance(new, str),
                "deferred": deferred,
            }
        )

    def walk(self, a: Any, b: Any, pa: str, pb: str) -> None:
        if len(self.changes) >= MAX_CHANGES:
            self.truncated = True
            return
        if isinstance(a, str) and _lone_text(b) is not None:
            b, pb = _lone_text(b), pb + "/0/text"
        elif isinstance(b, str) and _lone_text(a) is not None:
            a, pa = _lone_text(a), pa + "/0/text"
        if isinstance(a, dict) and isinstance(b, dict):
            keys = [k for k in a if k not in MARKER_KEYS] + [k for k in b if k not in a and k not in MARKER_KEYS]
            for k in keys:
                ka, kb = pa + "/" + escape(k), pb + "/" + escape(k)
                if k not in b:
                    self.add("removed", kb, ka, a[k], _MISSING)
                elif k not in a:
                    self.add("added", kb, None, _MISSING, b[k])
                elif _hash(a[k]) != _hash(b[k]):
                    self.walk(a[k], b[k], ka, kb)
        elif isinstance(a, list) and isinstance(b, list):
            self.walk_list(a, b, pa, pb)
        elif _hash(a) != _hash(b):
            self.add("changed", pb, pa, a, b)

    def walk_list(self, a: list, b: list, pa: str, pb: str) -> None:
        ha, hb = [_hash(x) for x in a], [_hash(x) for x in b]
        matcher = difflib.SequenceMatcher(None, ha, hb, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            for k in range(paired):
                self.walk(a[i1 + k], b[j1 + k], f"{pa}/{i1 + k}", f"{pb}/{j1 + k}")
            for k in range(i1 + paired, i2):
                self.add("removed", f"{pb}/{j1 + paired}", f"{pa}/{k}", a[k], _MISSING)
            for k in range(j1 + paired, j2):
                self.add("added", f"{pb}/{k}", None, _MISSING, b[k])


def _markers(value: Any, pointer: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in MARKER_KEYS:
                out[pointer + "/" + escape(k)] = v
            else:
                _markers(v, pointer + "/" + escape(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _markers(v, f"{pointer}/{i}", out)


def first_change(old: Any, new: Any, pointer: str) -> dict | None:
    """The first change between two values found at ``pointer`` in each body, as ``diff_bodies`` lists it."""
    walker = _Walker()
    walker.walk(old, new, pointer, pointer)
    return walker.changes[0] if walker.changes else None


def diff_bodies(old: Any, new: Any, budget: int | None = BUDGET_CHARS) -> dict:
    """Prompt changes (first difference first), parameter changes and cache marker moves."""
    prompt = _Walker(budget)
    params: list[dict] = []
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in PROMPT_ORDER if k in old or k in new]
        rest = [k for k in list(old) + [k for k in new if k not in old] if k not in PROMPT_ORDER]
        for k in keys:
            prompt.walk({k: old[k]} if k in old else {}, {k: new[k]} if k in new else {}, "", "")
        for k in rest:
            a, b = old.get(k, _MISSING), new.get(k, _MISSING)
            if a is _MISSING or b is _MISSING or _hash(a) != _hash(b):
                params.append(
                    {
                        "key": k,
                        "pointer": "/" + escape(k),
                        "old": None if a is _MISSING else a,
                        "new": None if b is _MISSING else b,
                        "op": "added" if a is _MISSING else "removed" if b is _MISSING else "changed",
                    }
                )
    elif _hash(old) != _hash(new):
        prompt.add("changed", "", "", old, new)
    old_marks: dict[str, Any] = {}
    new_marks: dict[str, Any] = {}
    _markers(old, "", old_marks)
    _markers(new, "", new_marks)
    moves = {
        "removed": [{"pointer": p, "value": v} for p, v in old_marks.items() if p not in new_marks],
        "added": [{"pointer": p, "value": v} for p, v in new_marks.items() if p not in old_marks],
        "changed": [
            {"pointer": p, "old": old_marks[p], "new": v}
            for p, v in new_marks.items()
            if p in old_marks and old_marks[p] != v
        ],
        "old": list(old_marks),
        "new": list(new_marks),
    }
    first = prompt.changes[0]["pointer"] if prompt.changes else None
    return {
        "identical_prompt": not prompt.changes,
        "first_pointer": first,
        "changes": prompt.changes,
        "truncated": prompt.truncated,
        "params": params,
        "marker_moves": moves,
    }
