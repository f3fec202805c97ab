"""The shell tools of real agent CLIs, and the command line a call to one of them runs.

The simulated agent runs its commands through the first shell the request declares, and reads a
shell's result back by the command it ran (``shell_command``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ctxscope.simulator.model.agent_view import json_arguments

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
        arguments = json_arguments(code.group(1))
    value = arguments.get("cmd", arguments.get("command"))
    if isinstance(value, list) and len(value) == 3 and value[:2] == ["bash", "-lc"]:
        value = value[2]
    return value if isinstance(value, str) else None
