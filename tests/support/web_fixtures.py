"""Helpers for the web UI tests: a daemon with the UI mounted, the simulator as every upstream,
and Debian's chromium driven by Playwright (a missing browser is an error, never a skip).
The ``browser`` and ``page`` fixtures are in conftest.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from support import sdk_clients
from support.loop_thread import LoopThread
from support.stored_calls import STORE_WAIT, wait_for_stored

CHROMIUM = os.environ.get("CTXSCOPE_CHROMIUM", "/usr/bin/chromium")
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
KEY = "sk-test-WEBUI-0123456789abcdef"


Loop = LoopThread


@dataclass
class WebDaemon:
    loop: Loop
    daemon: object
    sim_runner: object
    sim_url: str
    url: str
    db_path: Path

    def sim_state(self):
        from ctxscope.simulator.app import STATE_KEY

        return self.sim_runner.app[STATE_KEY]

    def wait_for_calls(self, n: int, session: str | None = None, timeout: float = STORE_WAIT) -> list[dict]:
        return wait_for_stored(self.db_path, n, session, timeout, writer=self.daemon.writer)

    def stop(self):
        self.loop.call(self.daemon.stop())
        self.loop.call(self.sim_runner.cleanup())
        self.loop.stop()


def start_web_daemon(tmp: Path) -> WebDaemon:
    """ctxscope serve on a free loopback port with the UI, the simulator behind every provider."""
    from ctxscope.daemon import start_daemon
    from ctxscope.settings import DaemonConfig
    from ctxscope.simulator.app import start_simulator

    os.environ["CTXSCOPE_HOME"] = str(tmp / "home")
    loop = Loop()
    sim_runner, sim_url = loop.call(start_simulator("127.0.0.1", 0))
    db_path = tmp / "captures.db"
    cfg = DaemonConfig(
        host="127.0.0.1", port=0, db=db_path, upstreams={"anthropic": sim_url, "openai": sim_url, "sim": sim_url}
    )
    daemon = loop.call(start_daemon(cfg))
    return WebDaemon(loop, daemon, sim_runner, sim_url, daemon.url, db_path)


def launch_browser(playwright):
    """Debian's chromium; raises (the test fails) when it is not installed."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"chromium not found at {CHROMIUM}: the web UI tests need it (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def anthropic_client(url: str, session: str | None = None):
    base = f"{url}/s/{session}/anthropic" if session else f"{url}/anthropic"
    return sdk_clients.Anthropic(api_key=KEY, base_url=base, max_retries=0)


def openai_client(url: str, session: str | None = None):
    base = f"{url}/s/{session}/openai/v1" if session else f"{url}/openai/v1"
    return sdk_clients.OpenAI(api_key=KEY, base_url=base, max_retries=0)


class AnswerLast:
    """Holds back the first request whose URL ``matches`` until ``release``, so its answer reaches
    the page after those asked for later: how a slow answer to an earlier request behaves."""

    def __init__(self, page, matches: Callable[[str], bool]):
        self.page, self.matches = page, matches
        self.held: list = []
        page.route(matches, lambda route: route.continue_() if self.held else self.held.append(route))

    def release(self) -> None:
        """Let the held request through and wait until the page has had its answer."""
        assert len(self.held) == 1, "the request to hold back was never sent"
        with self.page.expect_response(lambda r: self.matches(r.url)):
            self.held[0].continue_()
        self.page.evaluate("() => new Promise((done) => setTimeout(done, 100))")  # let the page handle it
