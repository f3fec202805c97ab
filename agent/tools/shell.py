"""The bash tool: one command in the workspace, stdout+stderr captured, exit code reported, timeout enforced.

The command runs in its own process group so a timeout or a cancelled turn kills everything it
started. Output is kept bounded (head and tail) — large results are the tool-output budget's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from ..core.tools import Tool, ToolContext, ToolError, ToolOutput

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
KEEP_BYTES = 512 * 1024  # kept at each end of a huge output


class _Bounded:
    def __init__(self, keep: int) -> None:
        self.keep, self.head, self.tail, self.dropped = keep, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                cut = len(self.tail) - self.keep
                self.dropped += cut
                del self.tail[:cut]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail}"
        return head + tail


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def bash(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    command = args["command"]
    if not command.strip():
        raise ToolError("command is empty")
    timeout = float(args.get("timeout") or DEFAULT_TIMEOUT)
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ToolError(f"timeout must be between 0 and {MAX_TIMEOUT:g} seconds")
    if not ctx.workspace.is_dir():
        raise ToolError(f"workspace {ctx.workspace} does not exist")
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=ctx.workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    out = _Bounded(KEEP_BYTES)

    async def collect() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            out.add(chunk)
        await proc.wait()

    timed_out = False
    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        timed_out = True
        _kill(proc)
        await proc.wait()
    except asyncio.CancelledError:
        _kill(proc)
        await asyncio.shield(proc.wait())
        raise
    text = out.text().rstrip("\n") or "(no output)"
    code = proc.returncode
    if timed_out:
        text += f"\n[timed out after {timeout:g} s; the command was killed]"
        return ToolOutput(text, True, {"exit_code": code, "timed_out": True})
    text += f"\n[exit code {code}]"
    return ToolOutput(text, code != 0, {"exit_code": code, "timed_out": False})


BASH = Tool(
    "bash",
    "Run a shell command with bash in the workspace. stdout and stderr are captured together "
    f"and the exit code is reported. Default timeout {DEFAULT_TIMEOUT:g} s (max {MAX_TIMEOUT:g}). "
    "No interactive input.",
    {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number", "description": "Seconds"}},
        "required": ["command"],
    },
    bash,
)
