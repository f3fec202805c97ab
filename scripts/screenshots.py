#!/usr/bin/env python
"""Regenerate the README's screenshots from what `ctxscope demo` produces.

Starts the daemon (proxy, simulator, UI) on a free port with a temporary database and home, runs
the demo's scripted agent session through it, then opens each page in Debian's chromium (through
Playwright, as the browser tests do) and saves it:

    .venv/bin/python scripts/screenshots.py                      # into docs/screenshots/
    .venv/bin/python scripts/screenshots.py --out /tmp/shots --width 1024

sessions.png (the sessions list), session.png (the demo session's timeline), call.png (the
checkpoint call, opened at its first difference) and diff.png (that call against its predecessor).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the browser launcher and the loop thread the tests use


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright
    from web_fixtures import Loop, launch_browser

    from ctxscope.daemon import start_daemon
    from ctxscope.demo import run_demo_session
    from ctxscope.inspector.store.queries import list_calls, open_db
    from ctxscope.settings import DaemonConfig

    tmp = Path(tempfile.mkdtemp(prefix="ctxscope-shots-"))
    os.environ["CTXSCOPE_HOME"] = str(tmp / "home")
    loop = Loop()
    cfg = DaemonConfig(host="127.0.0.1", port=0, db=tmp / "captures.db")
    daemon = loop.call(start_daemon(cfg))
    try:
        result = loop.call(run_demo_session(daemon, cfg.db, print), timeout=120)
        db = open_db(cfg.db)
        calls = list_calls(db, session=result.session, limit=None, newest_first=False)
        db.conn.close()
        checkpoint = next(
            (
                c
                for c in calls
                if c["relation"] == "DIVERGED" and any(m["kind"] == "checkpoint" for m in c.get("markers") or [])
            ),
            next(c for c in calls if c["relation"] == "DIVERGED"),
        )
        pages = {
            "sessions": ("#/", "table.sessions tbody tr"),
            "session": (f"#/session/{result.session}", "#app[data-ready='1'] tr.call-row"),
            "call": (f"#/call/{checkpoint['id']}", "#app[data-ready='1'] h1"),
            "diff": (f"#/diff/{checkpoint['id']}", "#app[data-ready='1'] ol.changes li"),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            try:
                for name, (hash_, ready) in pages.items():
                    page = browser.new_page(viewport={"width": args.width, "height": args.height})
                    page.goto(f"{daemon.url}/{hash_}")
                    page.wait_for_selector(ready)
                    page.wait_for_timeout(300)  # the rest of the rows arrive a frame after the first ones
                    path = args.out / f"{name}.png"
                    page.screenshot(path=str(path))
                    page.close()
                    print(f"wrote {path}")
            finally:
                browser.close()
    finally:
        loop.call(daemon.stop())
        loop.stop()


if __name__ == "__main__":
    main()
