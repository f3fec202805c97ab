"""The small agent the simulated model plays when a request declares tools and no script is queued.

It reads the request like a model would: the task is the first text the user typed after the
last final answer (reminder blocks left out; a text sent while tools run, such as a steer, is not
a new task), the tools are the ones the request declares, and the tool rounds are the calls and
results after that text. From those alone it picks the next step, one tool call per answer: list
the workspace, read the files the task names, grep what it asks to find, run the command it quotes,
hand the task to a sub-agent when asked to delegate, then write a final answer built from what the
tools returned. It stops after ``MAX_ROUNDS`` tool rounds at the latest. The same task, tools and
results always give the same answer (docs/architecture.md, "The simulator's agentic answers").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxscope.simulator.model.prompt import Block, Prompt
from ctxscope.simulator.model.script import Reply, ToolCallSpec

MAX_ROUNDS = 6
MAX_READS = 2
SNIPPET_CHARS = 160
MAX_QUOTED_LINES = 6

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
_LINE_NUMBER = re.compile(r"^\s*\d+\t")
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
class Round:
    """One tool call the model made after the task, and the result the request carries for it."""

    name: str
    arguments: dict[str, Any]
    result: str | None
    is_error: bool = False


@dataclass(frozen=True)
class AgentView:
    """What the simulated agent reads in a request."""

    task: str
    tools: tuple[str, ...]
    rounds: tuple[Round, ...]
    custom: frozenset[str] = frozenset()  # the declared tools that take free-form input (Responses custom tools)


@dataclass(frozen=True)
class Decision:
    """The next answer: one tool call, or the final text."""

    call: ToolCallSpec | None = None
    text: str = ""


def declared_tools(blocks: Sequence[Block]) -> tuple[str, ...]:
    """Names of the tools a request declares, in its order (all APIs' shapes)."""
    return tuple(name for name, _ in _declared(blocks))


def _declared(blocks: Sequence[Block]) -> list[tuple[str, bool]]:
    """(name, takes free-form input) of each declared tool. Codex declares its tools in an
    ``additional_tools`` input item, grouped in namespaces, beside (or instead of) ``tools``."""
    found: list[tuple[str, bool]] = []
    for block in blocks:
        if block.meta == "item|additional_tools":
            try:
                item = json.loads(block.text)
            except ValueError:
                continue
            groups = item.get("tools") if isinstance(item, dict) else None
            for group in groups if isinstance(groups, list) else []:
                found.extend(_tool_names(group))
        elif block.meta == "tool":
            try:
                found.extend(_tool_names(json.loads(block.text)))
            except ValueError:
                continue
    return found


def _tool_names(tool: Any) -> list[tuple[str, bool]]:
    names: list[tuple[str, bool]] = []
    if not isinstance(tool, dict):
        return names
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return [name for inner in tool["tools"] for name in _tool_names(inner)]
    custom = tool.get("type") == "custom"
    # Gemini nests its functions: {"functionDeclarations": [{"name": ...}, ...]}
    nested = tool.get("functionDeclarations", tool.get("function_declarations"))
    for entry in nested if isinstance(nested, list) else [tool]:
        fn = entry.get("function") if isinstance(entry, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            names.append((name, custom))
    return names


def _clean(text: str) -> str:
    return " ".join(_REMINDER.sub(" ", text).split())


def _is_user_text(meta: str) -> bool:
    return meta.startswith(("msg:user|", "cont:user|", "content:user|")) and meta.endswith("|text")


def _is_assistant_text(meta: str) -> bool:
    return meta.startswith(("msg:assistant|", "cont:assistant|", "content:model|")) and meta.endswith("|text")


def _call_of(meta: str) -> tuple[str, str] | None:
    """(call id, tool name) of a tool-call block: Anthropic tool_use, Chat tool_call, Responses function_call."""
    parts = meta.split("|")
    if len(parts) >= 4 and parts[1] == "tool_use":
        return parts[2], parts[3]
    if len(parts) >= 3 and parts[0] in ("tool_call", "function_call", "custom_tool_call"):
        return parts[1], parts[2]
    return None


def _result_of(meta: str) -> tuple[str, bool] | None:
    """(call id, is_error) of a tool-result block in any of the three shapes."""
    parts = meta.split("|")
    if len(parts) >= 4 and parts[1] == "tool_result":
        return parts[2], parts[3] == "True"
    if parts[0] == "function_call_output" and len(parts) >= 2:
        return parts[1], False
    if parts[0] == "msg:tool" and len(parts) >= 3:
        return parts[2], False
    return None


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _with_gemini_call_ids(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """Gemini's calls and results carry no id, only the function's name: the k-th result of a name
    answers its k-th call. They get ids in the shape of the Responses API's blocks, so one reader serves all."""
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    out = []
    for block in blocks:
        parts = block.meta.split("|")
        if len(parts) == 3 and parts[0] == "content:model" and parts[1] == "call":
            calls[parts[2]] = calls.get(parts[2], 0) + 1
            block = replace(block, meta=f"function_call|{parts[2]}#{calls[parts[2]]}|{parts[2]}")
        elif len(parts) == 3 and parts[0] == "content:user" and parts[1] == "result":
            results[parts[2]] = results.get(parts[2], 0) + 1
            block = replace(block, meta=f"function_call_output|{parts[2]}#{results[parts[2]]}")
        out.append(block)
    return tuple(out)


def read_view(prompt: Prompt) -> AgentView:
    """The task, the declared tools and the tool rounds after the task, from the linearised prompt."""
    blocks = _with_gemini_call_ids(prompt.blocks)
    start, task, open_task = 0, "", False  # open_task: tools were called for the task and no final answer yet
    for i, block in enumerate(blocks):
        if _is_user_text(block.meta) and _clean(block.text):
            if not open_task:  # a new task; a text sent while tools run (a steer, a reminder) is not one
                start, task = i, _clean(block.text)
        elif _is_assistant_text(block.meta) and block.text.strip():
            open_task = False
        elif _call_of(block.meta) is not None:
            open_task = True
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    order: list[str] = []
    results: dict[str, tuple[str, bool]] = {}
    for block in blocks[start:]:
        call = _call_of(block.meta)
        if call is not None:
            free_form = block.meta.startswith("custom_tool_call|")
            calls[call[0]] = (call[1], {"input": block.text} if free_form else _arguments(block.text))
            order.append(call[0])
            continue
        result = _result_of(block.meta)
        if result is not None:
            results[result[0]] = (block.text, result[1] or block.text.startswith("Error:"))
    rounds = tuple(
        Round(calls[i][0], calls[i][1], results.get(i, (None, False))[0], results.get(i, (None, False))[1])
        for i in order
    )
    declared = _declared(blocks)
    return AgentView(task, tuple(n for n, _ in declared), rounds, frozenset(n for n, custom in declared if custom))


# ------------------------------------------------------------------------------------ planning


# The shell tools of real agent CLIs, each with the arguments it takes: Claude Code's ``Bash``, pi's
# and opencode's ``bash``, Codex's ``exec_command``, ``shell_command`` and ``shell`` (an argv),
# Gemini CLI's ``run_shell_command``. The first one declared is the agent's shell.
SHELLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "bash": lambda command: {"command": command},
    "Bash": lambda command: {"command": command},
    "exec_command": lambda command: {"cmd": command},
    "shell_command": lambda command: {"command": command},
    "shell": lambda command: {"command": ["bash", "-lc", command]},
    "run_shell_command": lambda command: {"command": command},
    # Codex 0.171's code mode: one free-form `exec` tool whose JavaScript calls the nested tools
    "exec": lambda command: {"input": f"text(await tools.exec_command({json.dumps({'cmd': command})}))"},
}
_EXEC_COMMAND = re.compile(r"tools\.exec_command\((\{.*?\})\)")


def shell_command(name: str, arguments: dict[str, Any]) -> str | None:
    """The command line of a call to one of ``SHELLS`` (None for another tool)."""
    if name not in SHELLS:
        return None
    code = _EXEC_COMMAND.search(str(arguments.get("input", ""))) if name == "exec" else None
    if code is not None:
        arguments = _arguments(code.group(1))
    value = arguments.get("cmd", arguments.get("command"))
    if isinstance(value, list) and len(value) == 3 and value[:2] == ["bash", "-lc"]:
        value = value[2]
    return value if isinstance(value, str) else None


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


# ------------------------------------------------------------------------------------ answering


def _snippet(text: str) -> str:
    lines = [_LINE_NUMBER.sub("", line).strip() for line in text.splitlines()]
    first = next((line for line in lines if line and not line.startswith("[")), "")
    return first[:SNIPPET_CHARS] + ("…" if len(first) > SNIPPET_CHARS else "")


def _line(r: Round) -> str:
    result = _exec_output(r.result) if r.name == "exec" and r.result else r.result or ""
    if r.result is None:
        return f"- {r.name}: no result came back."
    if r.is_error:
        return f"- {r.name} {json.dumps(r.arguments, ensure_ascii=False)} failed: {_snippet(result)}"
    line = shell_command(r.name, r.arguments)
    if r.name == "ls" or line == "ls":
        entries = [e.strip() for e in result.splitlines() if e.strip() and not e.startswith("[")]
        shown = ", ".join(entries[:12]) + (", …" if len(entries) > 12 else "")
        return f"- The workspace holds {len(entries)} entries: {shown}."
    if r.name == "read":
        numbered = [line for line in result.splitlines() if _LINE_NUMBER.match(line)]
        lines = f"{len(numbered)} line{'s' * (len(numbered) != 1)}"
        return f'- {r.arguments.get("path")} ({lines} shown) begins: "{_snippet(result)}"'
    if r.name == "grep":
        hits = [line for line in result.splitlines() if line and not line.startswith("[")]
        if result.startswith("No matches"):
            return f"- grep {r.arguments.get('pattern')!r}: no matches."
        return f"- grep {r.arguments.get('pattern')!r}: {len(hits)} match(es), first: {_snippet(result)}"
    if line is not None:
        code = re.search(r"\[exit code (-?\d+)\]", result)
        status = f"exited with code {code.group(1)}" if code else "ran"
        return f"- `{line}` {status}; it printed: {_snippet(result)}"
    if r.name == "task":
        answer = [line.strip() for line in result.splitlines() if line.strip()][:MAX_QUOTED_LINES]
        return "- The sub-agent answered:" + "".join(f"\n  {line[:SNIPPET_CHARS]}" for line in answer)
    return f"- {r.name} returned: {_snippet(result)}"


def _exec_output(result: str) -> str:
    """What the command printed, from Codex's `exec` result (a JSON line with ``output`` and ``exit_code``)."""
    for line in result.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            return value["output"] + f"\n[exit code {value.get('exit_code', 0)}]"
    return result


def final_answer(view: AgentView) -> str:
    if not view.rounds:
        return f'sim agent: nothing to look at for "{view.task[:60]}"; no tool applies.'
    task = view.task if len(view.task) <= 100 else view.task[:100].rsplit(" ", 1)[0] + " …"
    lines = [f"Done: {task}"] if task else ["Done."]
    lines += [_line(r) for r in view.rounds]
    return "\n".join(lines)


def agentic_reply(prompt: Prompt) -> Reply | None:
    """The agent's answer to a request that declares tools; None for a request without tools."""
    view = read_view(prompt)
    if not view.tools:
        return None
    decision = decide(view)
    if decision.call is not None:
        return Reply("", "", (decision.call,), False)
    return Reply(decision.text, "", (), False)
