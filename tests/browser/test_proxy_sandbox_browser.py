"""An upstream's HTML page, opened through the proxy in a real headless chromium, cannot act on the
UI's origin: it runs no script, so it can neither read the UI's token nor delete a session."""

from __future__ import annotations

import json
import urllib.request

import pytest
from aiohttp import web

from support.loop_thread import LoopThread
from support.web_fixtures import anthropic_client

EVIL = """<!doctype html><html><head><title>docs</title></head><body>
<p>Nothing to see.</p>
<script>
  fetch("/u/docs/beacon?ran=1");
  document.title = "ran";
  fetch("/").then(r => r.text()).then(t => {
    const token = t.match(/name="ctxscope-token" content="([^"]+)"/)[1];
    fetch("/u/docs/beacon?token=" + token);
    return fetch("/_ctxscope/api/session?s=victim", {method: "DELETE", headers: {"X-Ctxscope-Token": token}});
  }).then(r => fetch("/u/docs/beacon?deleted=" + r.status));
</script>
<iframe src="/"></iframe>
</body></html>"""


class Docs:
    def __init__(self):
        self.beacons: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        if request.path.startswith("/beacon"):
            self.beacons.append(request.query_string)
            return web.Response(text="ok")
        return web.Response(text=EVIL, content_type="text/html")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    import os

    from ctxscope.daemon import start_daemon
    from ctxscope.settings import DaemonConfig
    from ctxscope.simulator.app import start_simulator

    tmp = tmp_path_factory.mktemp("sandbox")
    os.environ["CTXSCOPE_HOME"] = str(tmp / "home")
    loop = LoopThread()
    docs = Docs()

    async def start():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", docs.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        sim_runner, sim_url = await start_simulator("127.0.0.1", 0)
        return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", sim_runner, sim_url

    docs_runner, docs_url, sim_runner, sim_url = loop.call(start())
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=tmp / "captures.db",
        writer="thread",
        upstreams={"anthropic": sim_url, "openai": sim_url, "docs": docs_url},
    )
    running = loop.call(start_daemon(cfg))
    running.docs = docs
    yield running
    loop.call(running.stop())
    loop.call(docs_runner.cleanup())
    loop.call(sim_runner.cleanup())
    loop.stop()


def _sessions(url: str) -> set[str]:
    return {
        s["session"] for s in json.loads(urllib.request.urlopen(url + "/_ctxscope/api/sessions").read())["sessions"]
    }


def test_an_upstream_html_page_cannot_read_the_token_or_delete_a_session(daemon, browser):
    import time

    anthropic_client(daemon.url, "victim").messages.create(
        model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "keep me"}]
    )
    deadline = time.monotonic() + 10
    while "victim" not in _sessions(daemon.url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "victim" in _sessions(daemon.url)

    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(daemon.url + "/u/docs/x.html")
        assert page.locator("p").inner_text() == "Nothing to see."  # the page itself did load
        page.wait_for_timeout(1500)  # time for the script to run, if it could
        assert page.title() == "docs"
        assert page.evaluate("() => document.querySelector('iframe') !== null")
    finally:
        ctx.close()
    assert daemon.docs.beacons == []  # no script ran: no token read, no delete tried
    assert "victim" in _sessions(daemon.url)
