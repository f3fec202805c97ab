"""Runaway-guard projection: each tool call of a step as keyed fingerprints, never raw text.

A call becomes an *action* (tool + the policy's stable arguments), a *result* (tool, content,
details, error flag), an *error family* when it failed (an error code from details, else one of
eight classes matched by regex, else the first 1024 characters) and, where a policy knows it,
*progress* (loop key and position). Every one is an HMAC-SHA256 under a random 32-byte key drawn
per turn: equal inputs within a turn compare equal, nothing is comparable across turns, and the
raw arguments and outputs never leave the guard.

Before hashing, result text loses values that change on every run without meaning anything
(durations, clock times, hex addresses), so "ran 3 tests in 0.41s" twice is one result.

An output the tool-output budget moved to an artifact is fingerprinted by the artifact's content
hash (``details["externalized"]["sha256"]``), not by its receipt, which names a new file each time
(docs/architecture.md, "The guard sees through receipts").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.messages import ToolCall, ToolResult
from .policy import DEFAULT_POLICY, ToolPolicy

KEY_BYTES = 32
ERROR_TEXT_CHARS = 1024

# (class, pattern): the first class whose pattern occurs in the first 1024 characters of the error wins.
ERROR_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(p, re.IGNORECASE))
    for name, p in (
        ("timeout", r"timed? ?out|timeout|deadline exceeded"),
        ("rate_limit", r"rate.?limit|too many requests|\b429\b|quota exceeded"),
        ("permission_denied", r"permission denied|not permitted|access (is )?denied|\bEACCES\b|forbidden|\b403\b"),
        ("not_found", r"no such file|not found|does not exist|\bENOENT\b|cannot find|could not find|\b404\b"),
        (
            "connection",
            r"connection (refused|reset|aborted|closed)|\bECONNREFUSED\b|network is unreachable|"
            r"name or service not known|temporary failure in name resolution",
        ),
        ("syntax_error", r"syntax ?error|parse error|unexpected token|invalid syntax|malformed"),
        (
            "invalid_arguments",
            r"invalid argument|missing required|must be (of type|one of|a|an)\b|unknown argument|"
            r"usage:",
        ),
        ("resource_exhausted", r"out of memory|no space left|disk full|too large|memoryerror|killed"),
    )
)
_CODE_KEYS = ("error_code", "code", "errno")
_CODED_REASONS = ("invalid_arguments", "unknown_tool", "blocked")

_VOLATILE = (
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?\b"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(\.\d+)?\b"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|msec|s|sec|secs|seconds|µs|us)\b"), "<duration>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "<addr>"),
)


def normalise(text: str) -> str:
    for rx, placeholder in _VOLATILE:
        text = rx.sub(placeholder, text)
    return text


def error_family(result: ToolResult, text_key: str | None = None) -> str:
    """``code:<code>``, ``class:<class>`` or ``text:<first 1024 chars>`` (hashed before it leaves); ``text_key``
    replaces the text in the last form (an externalised output's content hash)."""
    d = result.details or {}
    for key in _CODE_KEYS:
        value = d.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return f"code:{value}"
    if d.get("reason") in _CODED_REASONS:
        return f"code:{d['reason']}"
    if d.get("timed_out") is True:
        return "class:timeout"
    text = result.content[:ERROR_TEXT_CHARS]
    for name, rx in ERROR_CLASSES:
        if rx.search(text):
            return f"class:{name}"
    return "text:" + (text_key if text_key is not None else normalise(text))


def family_label(family: str) -> str:
    """What a reminder may say about a family: codes and classes, never the text itself."""
    kind, _, value = family.partition(":")
    if kind == "code":
        return f"error code {value}"
    if kind == "class":
        return value.replace("_", " ")
    return "the same error message"


class Fingerprinter:
    """HMAC-SHA256 over canonical JSON, keyed per turn."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        if len(self.key) != KEY_BYTES:
            raise ValueError(f"the guard key must be {KEY_BYTES} bytes")

    def __call__(self, kind: str, *parts: Any) -> str:
        data = json.dumps([kind, *parts], ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
        return hmac.new(self.key, data.encode(), hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True)
class CallView:
    action: str
    result: str
    pair: str  # action and result together: "this call gave this answer"
    error_family: str | None  # fingerprint of (tool, family) when the call failed
    family_label: str | None
    polling: bool
    loop: str | None  # progress loop fingerprint
    position: str | None  # progress position fingerprint


@dataclass(frozen=True)
class StepView:
    step: int
    calls: tuple[CallView, ...]
    batch: str  # the step's actions as one multiset fingerprint ("" for a step without tool calls)


def result_content(result: ToolResult) -> tuple[str, dict[str, Any]]:
    """What a result says, for fingerprinting: an externalised output by its content hash, never its receipt."""
    details = dict((result.details or {}).items())
    moved = details.get("externalized")
    if isinstance(moved, Mapping) and isinstance(moved.get("sha256"), str):
        details["externalized"] = {"sha256": moved["sha256"], "bytes": moved.get("bytes")}
        return "externalized:" + moved["sha256"], details
    return normalise(result.content), details


def project_call(fp: Fingerprinter, call: ToolCall, result: ToolResult, policy: ToolPolicy) -> CallView:
    action = fp("action", call.name, policy.action_arguments(call))
    content, details = result_content(result)
    errored = policy.errored(call, result)
    res = fp("result", call.name, content, details, errored)
    moved = content.startswith("externalized:") and "externalized" in details
    family = error_family(result, content if moved else None) if errored else None
    progress = policy.progress_of(call, result)
    return CallView(
        action=action,
        result=res,
        pair=fp("pair", action, res),
        error_family=fp("error", call.name, family) if family else None,
        family_label=family_label(family) if family else None,
        polling=policy.polling,
        loop=fp("loop", progress.loop) if progress else None,
        position=fp("position", progress.loop, progress.position) if progress else None,
    )


def project_step(
    fp: Fingerprinter,
    step: int,
    calls: tuple[ToolCall, ...],
    results: tuple[ToolResult, ...],
    policies: Mapping[str, ToolPolicy],
) -> StepView:
    by_id: dict[str, ToolResult] = {}
    for r in results:  # results come in call order; ids may repeat, so position first
        by_id.setdefault(r.tool_call_id, r)
    views = []
    for i, call in enumerate(calls):
        result = results[i] if i < len(results) and results[i].tool_call_id == call.id else by_id.get(call.id)
        if result is None:
            continue
        views.append(project_call(fp, call, result, policies.get(call.name, DEFAULT_POLICY)))
    batch = fp("batch", sorted(v.action for v in views)) if views else ""
    return StepView(step, tuple(views), batch)
