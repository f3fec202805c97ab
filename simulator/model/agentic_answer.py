"""The simulated agent's final answer: one line per tool round, built from what the tools returned.

The same task, tools and results always give the same text (docs/architecture.md, "The simulator's
agentic answers").
"""

from __future__ import annotations

import json
import re

from ctxscope.simulator.model.agent_view import AgentView, Round
from ctxscope.simulator.model.shells import shell_command

SNIPPET_CHARS = 160
MAX_QUOTED_LINES = 6
_LINE_NUMBER = re.compile(r"^\s*\d+\t")


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
