"""``bench/web_first_screen.py --big``: the call and diff pages of big prompts.

For 200K, 1M and 4M tokens (about 0.8, 4 and 16 MB of agent-shaped messages), two calls each (the
second edits a tool result in the middle and adds two messages): the call and diff APIs' bytes and
time and, in Chromium, the bytes the call page fetched and its time until it is drawn.
"""

from __future__ import annotations

import json
import time
import urllib.request

from web_bench_session import Daemon

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
