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

With ``--big`` it measures the call and diff pages of big prompts instead (200K, 1M and 4M tokens;
``web_big_pages.py``). The session's shape and the daemon are ``web_bench_session.py``'s.

    .venv/bin/python bench/web_first_screen.py --big
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the session and pages beside this bench

from web_bench_session import Daemon, drive
from web_big_pages import big_pages

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
