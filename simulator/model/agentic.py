"""The small agent the simulated model plays when a request declares tools and no script is queued.

It reads the request like a model would (``agent_view.py``: the task, the declared tools, the tool
rounds since the task) and from those alone picks the next step, one tool call per answer: list
the workspace, read the files the task names, grep what it asks to find, run the command it quotes
(through the request's shell, ``shells.py``), hand the task to a sub-agent when asked to delegate,
then write a final answer built from what the tools returned (``agentic_answer.py``). It stops
after ``MAX_ROUNDS`` tool rounds at the latest. The same task, tools and results always give the
same answer (docs/architecture.md, "The simulator's agentic answers").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxscope.simulator.model.agent_view import AgentView, read_view
from ctxscope.simulator.model.agentic_answer import final_answer
from ctxscope.simulator.model.prompt import Prompt
from ctxscope.simulator.model.script import Reply, ToolCallSpec
from ctxscope.simulator.model.shells import SHELLS, shell_command

MAX_ROUNDS = 6
MAX_READS = 2

_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})(?![\w/])")
_QUOTED = re.compile(r"[\"'“‘]([^\"'”’\n]{2,60})[\"'”’]")
_BACKTICKS = re.compile(r"`([^`\n]{1,200})`")
_FIND = re.compile(
    r"\b(?:grep(?: for)?|search(?: for)?|look for|find|occurrences of|where is|mentions of)\s+"
    r"(?:the\s+)?(?:word\s+|string\s+|pattern\s+)?([A-Za-z_][\w.-]{1,40})",
    re.I,
)
_DELEGATE = re.compile(r"\b(?:sub-?agents?|delegate)\b", re.I)
_RUN = re.compile(r"\b(?:run|execute)\b", re.I)
_READ = re.compile(r"\b(?:read|open|show me|cat)\s+(?:the\s+|a\s+|file\s+)*([\w][\w./-]*)", re.I)
_STOP_WORDS = frozenset(
    {
        "the",
        "and",
        "for",
        "all",
        "any",
        "files",
        "file",
        "what",
        "that",
        "this",
        "with",
        "read",
        "list",
        "out",
        "how",
        "why",
        "where",
        "which",
        "who",
        "it",
        "them",
        "me",
        "everything",
        "more",
        "through",
        "about",
        "up",
    }
)


@dataclass(frozen=True)
class Decision:
    """The next answer: one tool call, or the final text."""

    call: ToolCallSpec | None = None
    text: str = ""


def _shell(tools: set[str]) -> str | None:
    return next((name for name in SHELLS if name in tools), None)


def _listing(view: AgentView) -> list[str]:
    for r in view.rounds:
        listed = r.name == "ls" or shell_command(r.name, r.arguments) == "ls"
        if listed and r.result and not r.is_error:
            return [line.strip() for line in r.result.splitlines() if line.strip() and not line.startswith("[")]
    return []


def _named_files(task: str, listing: Sequence[str]) -> list[str]:
    """Files the task names: paths it spells out, listed files whose name or stem it mentions, and
    whatever follows "read" or "open" that matched no listed file (tried as given, so a missing file
    is reported rather than silently skipped)."""
    text = _BACKTICKS.sub(" ", task)
    found: list[str] = []
    for path in _PATH.findall(text):
        dotted = path.rsplit(".", 1)
        if path not in found and ("/" in path or (not listing and len(dotted[1]) >= 2 and dotted[1].isalpha())):
            found.append(path)
    words = {w.lower() for w in re.findall(r"[\w-]+", text)}
    for entry in listing:
        stem = entry.split(".", 1)[0].lower()
        if (
            not entry.endswith("/")
            and entry not in found
            and (entry.lower() in text.lower() or (len(stem) >= 3 and stem in words and stem not in _STOP_WORDS))
        ):
            found.append(entry)
    known = {f.lower() for f in found} | {f.rsplit("/", 1)[-1].split(".", 1)[0].lower() for f in found}
    for word in _READ.findall(text):
        name = word.rstrip(".,;:")
        if name and name.lower() not in known and name.lower() not in _STOP_WORDS:
            found.append(name)
            known.add(name.lower())
    return found[:MAX_READS]


def _pattern(task: str) -> str | None:
    quoted = _QUOTED.search(task)
    if quoted and not _PATH.fullmatch(quoted.group(1)):
        return quoted.group(1)
    found = _FIND.search(_BACKTICKS.sub(" ", task))
    if found and found.group(1).lower() not in _STOP_WORDS:
        return found.group(1)
    return None


def _delegated(task: str) -> str:
    """The task as handed to a sub-agent: the request without the words asking to delegate."""
    text = re.sub(r"^.*?\b(?:sub-?agents?|delegate)\b[\s:,-]*(?:to\s+)?", "", task, count=1, flags=re.I)
    return text.strip() or task


def _plan(view: AgentView) -> list[ToolCallSpec]:
    """Every call the task asks for, in order; the first one not made yet is the next step."""
    tools, task = set(view.tools), view.task
    plan: list[ToolCallSpec] = []

    def add(name: str, **arguments: Any) -> None:
        if name in view.custom:
            plan.append(ToolCallSpec(name, str(arguments.get("input", "")), custom=True))
            return
        plan.append(ToolCallSpec(name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))))

    if "task" in tools and _DELEGATE.search(task):
        add("task", description=_delegated(task)[:60], prompt=_delegated(task))
        return plan
    shell = _shell(tools - ({"exec"} - view.custom))  # `exec` is a shell only as Codex's free-form code tool
    if "ls" in tools:
        add("ls")
    elif shell:
        add(shell, **SHELLS[shell]("ls"))
    if "read" in tools:
        for path in _named_files(task, _listing(view)):
            add("read", path=path)
    pattern = _pattern(task)
    if pattern and "grep" in tools:
        add("grep", pattern=re.escape(pattern), max_results=20)
    command = _BACKTICKS.search(task)
    if command and _RUN.search(task) and shell:
        add(shell, **SHELLS[shell](command.group(1)))
    return plan


def decide(view: AgentView) -> Decision:
    """The next step of the simulated agent."""
    made = [(r.name, r.arguments) for r in view.rounds]
    if len(made) < MAX_ROUNDS:
        for call in _plan(view):
            if (call.name, call.input_object()) not in made:
                return Decision(call=call)
    return Decision(text=final_answer(view))


def agentic_reply(prompt: Prompt) -> Reply | None:
    """The agent's answer to a request that declares tools; None for a request without tools."""
    view = read_view(prompt)
    if not view.tools:
        return None
    decision = decide(view)
    if decision.call is not None:
        return Reply("", "", (decision.call,), False)
    return Reply(decision.text, "", (), False)
