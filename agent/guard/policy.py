"""Runaway-guard tool policies: what of a call is its stable action, what counts as an error, what is progress.

Policies keep the guard from mistaking legitimate work for a loop:

- In ``bash``/``sh``/``shell``/``zsh``, a lone ``rg``, ``grep`` or ``git grep`` that exits 1 found
  nothing; that is an answer, not an error. The ``grep`` tool's "No matches found." likewise.
- ``task_status``/``task_output``/``task_query`` are polling tools: they are judged by the task's
  status and output cursor (loop key = the task, progress key = status + cursor), never as
  repeated actions.
- ``bash`` actions are the command alone (a changed timeout is the same action).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.messages import ToolCall, ToolResult

SHELL_TOOLS = ("bash", "sh", "shell", "zsh")
POLLING_TOOLS = ("task_status", "task_output", "task_query")
_GREP_COMMANDS = ("rg", "grep", "egrep", "fgrep")
_OPERATORS = set("|&;<>()`$")


@dataclass(frozen=True)
class Progress:
    """A loop the model is in (``loop``) and how far it got (``position``); a new position is progress."""

    loop: str
    position: str


@dataclass(frozen=True)
class ToolPolicy:
    stable_fields: tuple[str, ...] | None = None  # None: every argument is part of the action
    is_error: Callable[[ToolCall, ToolResult], bool] | None = None
    progress: Callable[[ToolCall, ToolResult], Progress | None] | None = None
    polling: bool = False  # judged by progress, never as a repeated action

    def action_arguments(self, call: ToolCall) -> Any:
        if call.invalid_arguments is not None:
            return {"invalid": call.raw_arguments or call.invalid_arguments}
        if self.stable_fields is None:
            return call.arguments
        return {k: call.arguments.get(k) for k in self.stable_fields}

    def errored(self, call: ToolCall, result: ToolResult) -> bool:
        return self.is_error(call, result) if self.is_error is not None else result.is_error

    def progress_of(self, call: ToolCall, result: ToolResult) -> Progress | None:
        return self.progress(call, result) if self.progress is not None else None


DEFAULT_POLICY = ToolPolicy()


def is_lone_search(command: str) -> bool:
    """True for one plain rg/grep/git grep command: no pipe, list, redirection or substitution."""
    if any(ch in command for ch in "\n"):
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return False
    if not words or any(w and set(w) <= _OPERATORS for w in words) or "$(" in command or "`" in command:
        return False
    head = words[0].rsplit("/", 1)[-1]
    return head in _GREP_COMMANDS or (head == "git" and len(words) > 1 and words[1] == "grep")


def _shell_error(call: ToolCall, result: ToolResult) -> bool:
    if not result.is_error:
        return False
    command = call.arguments.get("command") if isinstance(call.arguments, dict) else None
    # "no match" (exit code 1 of a lone search) is an answer, not a failure
    return not (result.details.get("exit_code") == 1 and isinstance(command, str) and is_lone_search(command))


_NO_MATCH = re.compile(r"^\s*no match(es)?( found)?\b", re.IGNORECASE)


def _grep_error(call: ToolCall, result: ToolResult) -> bool:
    return result.is_error and not _NO_MATCH.match(result.content)


def _task_id(args: Mapping[str, Any]) -> str:
    for key in ("task_id", "id", "task"):
        if args.get(key) is not None:
            return str(args[key])
    return ""


def _task_progress(call: ToolCall, result: ToolResult) -> Progress:
    """Status and output cursor: from details when the tool gives them, else the output's length."""
    d = result.details
    status = d.get("status", d.get("state", ""))
    cursor = d.get("cursor", d.get("offset", d.get("output_bytes", d.get("next_cursor"))))
    if cursor is None:
        cursor = f"len:{len(result.content)}"
    return Progress(f"{call.name}:{_task_id(call.arguments)}", f"{status}|{cursor}|{result.is_error}")


def default_policies() -> dict[str, ToolPolicy]:
    """The production tool policies, by tool name."""
    shell = ToolPolicy(stable_fields=("command",), is_error=_shell_error)
    polling = ToolPolicy(stable_fields=None, progress=_task_progress, polling=True)
    policies = dict.fromkeys(SHELL_TOOLS, shell)
    policies["grep"] = ToolPolicy(is_error=_grep_error)
    policies.update(dict.fromkeys(POLLING_TOOLS, polling))
    return policies
