"""The agent-shaped session the web benches open, driven through a daemon with the UI and the simulator.

``Agent`` plays a coding agent through the real Anthropic SDK: tool loops, a reminder every tenth
call, a moving cache breakpoint, a title side call every 97 calls, a system-prompt edit at call 150
that breaks the cache, and a compaction every 333 calls. ``Daemon`` runs the daemon and the
simulator in their own thread and event loop (``bench/web_first_screen.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from pathlib import Path

SYSTEM = (
    "You are a coding agent working in a local repository. Read files before editing them, keep changes "
    "small, run the tests after each change and report what you changed and why. "
) * 40
TOOLS = [
    {
        "name": name,
        "description": desc,
        "input_schema": {"type": "object", "properties": props, "required": list(props)},
    }
    for name, desc, props in [
        (
            "read",
            "Read a file (offset and limit in lines).",
            {"path": {"type": "string"}, "offset": {"type": "integer"}},
        ),
        ("grep", "Search files for a regular expression.", {"pattern": {"type": "string"}, "path": {"type": "string"}}),
        (
            "edit",
            "Replace an exact string in a file.",
            {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        ),
        ("bash", "Run a shell command with a timeout.", {"command": {"type": "string"}}),
        ("todowrite", "Replace the todo list.", {"todos": {"type": "array", "items": {"type": "string"}}}),
    ]
]
FILES = ["src/parser.py", "src/lexer.py", "tests/test_parser.py", "README.md", "src/cli.py", "src/cache.py"]


class Agent:
    """An agent-shaped client: tool loops, reminders, a moving breakpoint, compactions, side calls."""

    def __init__(self, daemon_url: str, sim, label: str, seed: int = 7):
        import anthropic  # the real SDK as the client, as an agent would use it

        self.client = anthropic.Anthropic(
            base_url=f"{daemon_url}/s/{label}/anthropic", api_key="sk-bench-not-a-real-key", max_retries=0
        )
        self.sim = sim  # a SimulatorControl
        self.rng = random.Random(seed)
        self.system = SYSTEM
        self.history: list[dict] = [
            {"role": "user", "content": "Fix the failing parser tests and tidy the cache module."}
        ]
        self.calls = 0

    def _script(self, step: dict) -> None:
        self.sim.append_script([step])

    def _send(self, system: str, messages: list[dict], model: str = "claude-sonnet-4-6", tools=TOOLS) -> dict:
        msgs = json.loads(json.dumps(messages))
        last = msgs[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"][-1]["cache_control"] = {"type": "ephemeral"}  # the breakpoint moves every call
        body = {
            "model": model,
            "max_tokens": 1024,
            "messages": msgs,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        }
        if tools:
            body["tools"] = tools
        self.calls += 1
        return self.client.messages.create(**body).model_dump(exclude_none=True)

    def step(self) -> None:
        n = self.calls
        if n and n % 97 == 0:  # a side call: title generation, its own system prompt, no tools
            self._script({"text": "Parser test fixes"})
            self._send(
                "Write a 3-5 word title for this conversation.",
                [{"role": "user", "content": self.history[0]["content"]}],
                model="claude-haiku-4-5",
                tools=None,
            )
            return
        if n and n % 333 == 0:  # compaction: the whole history becomes one summary message
            self._script({"text": "Summary of the work so far: parser fixed, cache module pending."})
            summary = self._send(
                self.system, self.history + [{"role": "user", "content": "Summarise the conversation so far."}]
            )
            text = summary["content"][0]["text"]
            self.history = [
                {
                    "role": "user",
                    "content": "This session is being continued from a previous conversation "
                    "that ran out of context. The summary below covers the earlier portion.\n\n" + text,
                }
            ]
            return
        if n == 150:  # the client edits its system prompt mid-session: a cache break
            self.system = SYSTEM.replace("keep changes small", "keep changes small and documented", 1)
        tool = self.rng.choice(["read", "read", "grep", "edit", "bash"])
        path = self.rng.choice(FILES)
        args = {
            "read": {"path": path},
            "grep": {"pattern": "def parse", "path": "src"},
            "edit": {"path": path, "old": "x = 1", "new": "x = 2"},
            "bash": {"command": "pytest -q"},
        }[tool]
        self._script({"text": f"Let me {tool} {path}.", "tool_calls": [{"name": tool, "arguments": args}]})
        resp = self._send(self.system, self.history)
        self.history.append({"role": "assistant", "content": resp["content"]})
        use = next(b for b in resp["content"] if b["type"] == "tool_use")
        output = "\n".join(
            f"{i:4d}  line {i} of {path}: value = {self.rng.randint(0, 9999)}" for i in range(self.rng.randint(5, 40))
        )
        content: list[dict] = [{"type": "tool_result", "tool_use_id": use["id"], "content": output}]
        if n % 10 == 5:
            content.append(
                {
                    "type": "text",
                    "text": "<system-reminder>Open todos: 3. Update the todo list when a task is done."
                    "</system-reminder>",
                }
            )
        self.history.append({"role": "user", "content": content})


class Daemon:
    """The daemon with the UI, in its own thread and event loop."""

    def __init__(self, tmp: Path):
        from ctxscope.daemon import start_daemon
        from ctxscope.settings import DaemonConfig
        from ctxscope.simulator.app import STATE_KEY, start_simulator
        from ctxscope.simulator.control.client import SimulatorControl

        os.environ["CTXSCOPE_HOME"] = str(tmp / "home")
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.sim_runner, self.sim_url = self.call(start_simulator("127.0.0.1", 0))
        self.sim_control = SimulatorControl(self.sim_url, self.sim_runner.app[STATE_KEY].control_token)
        self.db = tmp / "captures.db"
        cfg = DaemonConfig(
            host="127.0.0.1",
            port=0,
            db=self.db,
            upstreams={"anthropic": self.sim_url, "openai": self.sim_url, "sim": self.sim_url},
        )
        self.daemon = self.call(start_daemon(cfg))
        self.url = self.daemon.url

    def call(self, coro, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_stored(self, n: int, timeout: float = 300) -> None:
        from ctxscope.inspector.store.queries import open_db

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            db = open_db(self.db)
            count = db.execute("SELECT COUNT(*) FROM calls WHERE relation IS NOT NULL OR api IS NULL").fetchone()[0]
            db.close()
            if count >= n:
                return
            time.sleep(0.1)
        raise SystemExit(f"only {count} of {n} calls stored")

    def stop(self) -> None:
        self.call(self.daemon.stop())
        self.call(self.sim_runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)


def drive(d: Daemon, label: str, calls: int, seed: int = 7) -> float:
    agent = Agent(d.url, d.sim_control, label, seed)
    t0 = time.perf_counter()
    while agent.calls < calls:
        agent.step()
    return time.perf_counter() - t0
