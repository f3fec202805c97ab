#!/usr/bin/env python
"""How fast the web UI opens a 1,000-call session, in a real headless browser.

Starts the daemon with the UI and the simulator behind it, drives an agent-shaped Anthropic
session of ``--calls`` calls through it over HTTP (tool calls and results, reminders, a moving
cache breakpoint, side calls for titles, a system-prompt edit that breaks the cache, compactions),
then opens ``#/session/<label>`` in Debian's chromium several times, each in a fresh browser
context, and prints the time to first screen: from navigation start until the timeline rows and
the chart are on the page. Also prints the session API's own time.

    .venv/bin/python bench/web_first_screen.py                     # 1,000 calls, 7 loads
    .venv/bin/python bench/web_first_screen.py --calls 200 --loads 3
    .venv/bin/python bench/web_first_screen.py --screenshots docs/screenshots

With ``--screenshots DIR`` it also captures the README's pictures of each page (sessions,
session, call, diff) from a shorter demo session of the same shape.

With ``--big`` it measures the call and diff pages of big prompts instead: for 200K, 1M and 4M
tokens (about 0.8, 4 and 16 MB of agent-shaped messages), two calls each (the second edits a tool
result in the middle and adds two messages), and prints the call and diff APIs' bytes and time and,
in Chromium, the bytes the call page fetched and its time until it is drawn.

    .venv/bin/python bench/web_first_screen.py --big
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

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


_MARKS = """() => Object.fromEntries(performance.getEntriesByType("mark").map((m) => [m.name, m.startTime]))"""


def first_screen(browser, url: str, label: str, loads: int) -> list[dict]:
    """Per load (a fresh browser context each): milliseconds from navigation start until the data
    arrived, the rows and chart were built, and the frame after that was painted."""
    out = []
    for _ in range(loads):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.goto(f"{url}/#/session/{label}")
        page.wait_for_selector("#app[data-ready='1'] tr.call-row")
        page.wait_for_selector(".chart path.s-read")
        page.wait_for_function("performance.getEntriesByName('ctxscope:session-painted').length > 0")
        marks = page.evaluate(_MARKS)
        nav = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
        out.append(
            {
                "dom": nav,
                "data": marks["ctxscope:session-data"],
                "built": marks["ctxscope:session-ready"],
                "painted": marks["ctxscope:session-painted"],
            }
        )
        ctx.close()
    return out


def api_times(url: str, label: str, n: int = 7) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{url}/_ctxscope/api/session?s={label}", timeout=30) as resp:
            size = len(resp.read())
        out.append((time.perf_counter() - t0) * 1000)
    api_times.size = size
    return out


def screenshots(browser, d: Daemon, out_dir: Path, already: int, long_label: str) -> None:
    """The README's pictures: sessions, a demo session, a call with tool use, the diff at a break."""
    from ctxscope.inspector.store.queries import open_db

    out_dir.mkdir(parents=True, exist_ok=True)
    drive(d, "refactor-parser", 160, seed=3)
    import openai

    client = openai.OpenAI(
        base_url=f"{d.url}/s/title-check/openai/v1", api_key="sk-bench-not-a-real-key", max_retries=0
    )
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Name this branch."}])
    d.wait_stored(already + 160 + 1)
    db = open_db(d.db)
    rows = db.execute(
        "SELECT id, seq, relation, markers FROM calls WHERE session = 'refactor-parser' ORDER BY seq"
    ).fetchall()
    db.close()
    diverged = next(r for r in rows if r[2] == "DIVERGED")
    tool_call = next(r for r in rows if r[1] >= 40 and '"reminder"' in (r[3] or ""))  # a call with a reminder in it
    ctx = browser.new_context(viewport={"width": 1320, "height": 860}, device_scale_factor=1)
    page = ctx.new_page()
    content_height = "Math.ceil(document.querySelector('#app').getBoundingClientRect().bottom) + 10"
    page.goto(d.url + "/")
    page.wait_for_selector(".session-link")
    page.screenshot(
        path=str(out_dir / "sessions.png"),
        clip={"x": 0, "y": 0, "width": 1320, "height": min(860, page.evaluate(content_height))},
    )
    db = open_db(d.db)
    compacted = db.execute(
        "SELECT seq FROM calls WHERE session = ? AND has_compaction_before = 1 ORDER BY seq DESC LIMIT 1", [long_label]
    ).fetchone()
    db.close()
    offset = max(0, compacted[0] - 8) if compacted else 0
    page.goto(f"{d.url}/#/session/{long_label}?offset={offset}")
    page.wait_for_selector("#app[data-ready='1'] tr.call-row")
    page.screenshot(path=str(out_dir / "session.png"))
    page.goto(f"{d.url}/#/call/{tool_call[0]}")
    page.wait_for_selector("#app[data-ready='1'] .reqview")
    page.screenshot(
        path=str(out_dir / "call.png"), full_page=True, clip={"x": 0, "y": 0, "width": 1320, "height": 1300}
    )
    page.goto(f"{d.url}/#/diff/{diverged[0]}")
    page.wait_for_selector("#app[data-ready='1'] .change-detail")
    page.screenshot(
        path=str(out_dir / "diff.png"),
        clip={"x": 0, "y": 0, "width": 1320, "height": min(860, page.evaluate(content_height))},
    )
    ctx.close()
    print(f"screenshots: {', '.join(sorted(p.name for p in out_dir.glob('*.png')))} in {out_dir}")


BIG_TOKENS = (200_000, 1_000_000, 4_000_000)


def big_prompt(tokens: int) -> list[dict]:
    """About ``tokens`` tokens (4 bytes each) of tool calls and their 6,000-character results."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing parser tests."}]
    size, i = 0, 0
    while size < tokens * 4:
        text = (f"result {i}: " + f"line {i} of a file the tool read. " * 200)[:6000]
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"path": f"f{i}"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
        ]
        size += len(text) + 150
        i += 1
    return messages


def _get(url: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        size = len(resp.read())
    return size, (time.perf_counter() - t0) * 1000


def big_pages(d: Daemon, browser) -> None:
    """The call and diff pages of two big calls per size: bytes and times."""
    import anthropic

    from ctxscope.inspector.store.queries import open_db
    from ctxscope.simulator.app import STATE_KEY

    d.sim_runner.app[STATE_KEY].context_window = 2 * max(BIG_TOKENS)  # the simulator takes them all
    for n, tokens in enumerate(BIG_TOKENS):
        label = f"big-{tokens}"
        client = anthropic.Anthropic(
            base_url=f"{d.url}/s/{label}/anthropic", api_key="sk-bench-not-a-real-key", max_retries=0
        )
        first = big_prompt(tokens)
        second = json.loads(json.dumps(first))
        block = second[(len(second) // 2) & ~1]["content"][0]
        block["content"] = block["content"][:3000] + " EDITED " + block["content"][3000:]
        second += [{"role": "assistant", "content": "read them all"}, {"role": "user", "content": "now the last one"}]
        for messages in (first, second):
            client.messages.create(
                model="claude-sonnet-4-6", max_tokens=64, system="You are a coding agent.", messages=messages
            )
        d.wait_stored(2 * (n + 1))
        db = open_db(d.db)
        call_id, size = db.execute(
            "SELECT id, request_bytes FROM calls WHERE session = ? ORDER BY seq DESC", [label]
        ).fetchone()
        db.close()
        call_bytes, call_ms = _get(f"{d.url}/_ctxscope/api/call?id={call_id}")
        diff_bytes, diff_ms = _get(f"{d.url}/_ctxscope/api/diff?id={call_id}")
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        fetched: list = []
        page.on("response", lambda r, into=fetched: None if "/api/events" in r.url else into.append(r))
        t0 = time.perf_counter()
        page.goto(f"{d.url}/#/call/{call_id}")
        page.wait_for_selector("#app[data-ready='1'] .reqview")
        page_ms = (time.perf_counter() - t0) * 1000
        page.wait_for_timeout(1000)  # the first screens of the texts in view
        page_bytes = sum(len(r.body()) for r in fetched if r.ok)
        t0 = time.perf_counter()
        page.goto(f"{d.url}/#/diff/{call_id}")
        page.wait_for_selector("#app[data-ready='1'] #first-diff")
        diff_page_ms = (time.perf_counter() - t0) * 1000
        ctx.close()
        print(
            f"{tokens // 1000}K tokens ({size / 1e6:.1f} MB prompt): call API {call_bytes / 1024:.0f} KiB "
            f"in {call_ms:.0f} ms, diff API {diff_bytes / 1024:.0f} KiB in {diff_ms:.0f} ms; call page fetched "
            f"{page_bytes / 1024:.0f} KiB (scripts included), drawn in {page_ms:.0f} ms; "
            f"diff page {diff_page_ms:.0f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--loads", type=int, default=7)
    ap.add_argument("--chromium", default=os.environ.get("CTXSCOPE_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--screenshots", type=Path, default=None, help="also write the README's page screenshots here")
    ap.add_argument("--big", action="store_true", help="the call and diff pages of 200K/1M/4M-token calls instead")
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="ctxscope-web-bench-"))
    d = Daemon(tmp)
    if args.big:
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
                big_pages(d, browser)
                browser.close()
        finally:
            d.stop()
        return
    label = f"bench-{args.calls}"
    try:
        seconds = drive(d, label, args.calls)
        d.wait_stored(args.calls)
        print(
            f"session: {args.calls} calls driven through the daemon in {seconds:.1f} s "
            f"({args.calls / seconds:.0f} calls/s)"
        )
        api = api_times(d.url, label)
        print(
            f"session API (page + series of all {args.calls} calls, {api_times.size / 1024:.0f} KiB): "
            f"median {statistics.median(api):.0f} ms, min {min(api):.0f} ms"
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            first_screen(browser, d.url, label, 1)  # warm the OS file cache and the daemon's connections
            loads = first_screen(browser, d.url, label, args.loads)
            med = {k: statistics.median(x[k] for x in loads) for k in loads[0]}
            painted = [x["painted"] for x in loads]
            print(
                f"first screen of the {args.calls}-call session, {args.loads} loads in fresh browser contexts "
                f"(ms from navigation start, medians): page parsed {med['dom']:.0f}, data in {med['data']:.0f}, "
                f"rows and chart built {med['built']:.0f}, painted {med['painted']:.0f}"
            )
            budget = 1000
            print(
                f"time to first screen: median {med['painted']:.0f} ms "
                f"(min {min(painted):.0f}, max {max(painted):.0f}); "
                f"budget {budget} ms: {'OK' if med['painted'] < budget else 'OVER'}"
            )
            if args.screenshots:
                screenshots(browser, d, args.screenshots, args.calls, label)
            browser.close()
    finally:
        d.stop()


if __name__ == "__main__":
    sys.exit(main())
