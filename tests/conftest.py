"""Shared fixtures: a real daemon on loopback, in its own thread and event loop, with a real store.

The daemon runs in a background thread so tests can use the synchronous SDK clients as a user
would, while the daemon keeps serving.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web

from support import sdk_clients
from support.longest_first import CACHE_KEY, SecondsLog, longest_first
from support.loop_thread import LoopThread
from support.stored_calls import STORE_WAIT, wait_for_stored
from support.web_fixtures import Loop, launch_browser

# Bytecode is written, as an installed package has it ("Checks that keep the shape"): the suite
# starts hundreds of Python processes (daemons, writer children, commands), and where the
# environment sets PYTHONDONTWRITEBYTECODE each one compiled ctxscope's sources again, and each
# worker re-rewrote every test module's asserts (collection: 19 s of CPU, 7.6 s with bytecode).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

TESTS = Path(__file__).resolve().parent
LAST_SECONDS = pytest.StashKey[dict]()
BROWSER_FIXTURES = frozenset({"browser", "page"})
# Fixtures that start a real daemon (in a thread or a process) with its writer child: a test that
# uses one runs a whole path, so it is e2e wherever it lives.
DAEMON_FIXTURES = frozenset({"proxy", "checked_proxy", "demo_daemon", "daemon", "daemons", "daemon_url"})


def pytest_configure(config: pytest.Config) -> None:
    """The controller (or a run without workers) reads the last run's test times once, for the
    order, and keeps this run's (support/longest_first.py)."""
    if not hasattr(config, "workerinput"):
        config.stash[LAST_SECONDS] = config.cache.get(CACHE_KEY, {}) if config.cache is not None else {}
        config.pluginmanager.register(SecondsLog(config), "ctxscope-test-seconds")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Every xdist worker sorts by the same times, so all collect the same order."""
    node.workerinput[CACHE_KEY] = node.config.stash[LAST_SECONDS]


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The folder and the fixtures say what a test is: ``e2e`` under tests/e2e/ or with a real
    daemon, ``browser`` when it opens a page (CONTRIBUTING.md); ``slow`` is marked where the test
    is defined. Then the longest files go first (support/longest_first.py)."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder == "e2e" or DAEMON_FIXTURES & fixtures:
            item.add_marker(pytest.mark.e2e)
        if folder == "browser" or BROWSER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.browser)
    worker = getattr(config, "workerinput", None)
    longest_first(items, worker[CACHE_KEY] if worker is not None else config.stash[LAST_SECONDS])


class RecordingSimulator:
    """The provider simulator with a tap on every response body it writes (the upstream's bytes)."""

    def __init__(self, loop: LoopThread):
        from ctxscope.simulator.app import create_app, make_runner

        self.loop = loop
        self.written: list[bytearray] = []
        app = create_app()
        app.on_response_prepare.append(self._tap)
        self.app = app

        async def start():
            runner = make_runner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, site._server.sockets[0].getsockname()[1]

        self.runner, port = loop.call(start())
        self.url = f"http://127.0.0.1:{port}"

    async def _tap(self, request, response):
        buf = bytearray()
        self.written.append(buf)
        if isinstance(response, web.Response) and response.body is not None:
            buf.extend(response.body)
            return
        original = response.write

        async def write(data):
            buf.extend(data)
            return await original(data)

        response.write = write

    def state(self):
        from ctxscope.simulator.app import STATE_KEY

        return self.app[STATE_KEY]


@pytest.fixture(autouse=True)
def _close_sdk_clients():
    """Every SDK client a test made through sdk_clients is closed after it."""
    yield
    sdk_clients.close_all()


@pytest.fixture
def quiet_gap(monkeypatch: pytest.MonkeyPatch) -> float:
    """The writer's pause in the traffic at 0.25 s instead of 50 ms, for the tests that keep a burst
    going with short sleeps: a loaded machine can stretch a 10 ms sleep past 50 ms, which the
    writer rightly takes for a pause (docs/architecture.md, "The writer's supervisor")."""
    from ctxscope.inspector.writer.daemon_side import handover

    monkeypatch.setattr(handover, "QUIET_GAP", 0.25)
    return 0.25


@pytest.fixture
def loop_thread():
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture
def sim(loop_thread):
    s = RecordingSimulator(loop_thread)
    yield s
    loop_thread.call(s.runner.cleanup())


class RunningProxy:
    """A started ctxscope daemon (proxy + writer) and helpers to read what it captured."""

    def __init__(self, loop_thread: LoopThread, daemon, db_path: Path):
        self.loop_thread = loop_thread
        self.daemon = daemon
        self.url = daemon.url
        self.db_path = db_path

    def wait_for_calls(self, n: int, timeout: float = STORE_WAIT) -> list[dict]:
        return wait_for_stored(self.db_path, n, timeout=timeout, writer=self.daemon.writer)

    def stop(self):
        self.loop_thread.call(self.daemon.stop())


@pytest.fixture
def writer_mode():
    """Where the daemon stores captures; tests may override with "thread" to inject faults."""
    return "process"


@pytest.fixture
def proxy(loop_thread, sim, tmp_path, monkeypatch, writer_mode):
    """ctxscope serve on a free loopback port, with the recording simulator as upstream `sim`
    and also as the `anthropic`, `openai` and `gemini` upstreams (so SDK base URLs look like real use)."""
    from ctxscope.daemon import start_daemon
    from ctxscope.settings import DaemonConfig

    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    db_path = tmp_path / "captures.db"
    cfg = DaemonConfig(
        host="127.0.0.1",
        port=0,
        db=db_path,
        upstreams={"anthropic": sim.url, "openai": sim.url, "gemini": sim.url, "sim": sim.url},
        writer=writer_mode,
    )
    daemon = loop_thread.call(start_daemon(cfg))
    running = RunningProxy(loop_thread, daemon, db_path)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def _simulator_thread():
    """One simulator in a thread per test module (the SDK tests' simulator)."""
    from ctxscope.simulator.background import simulator_in_thread

    with simulator_in_thread() as running:
        yield running


@pytest.fixture
def sim_alone(_simulator_thread):
    """The simulator alone, no proxy in front: each test starts from an empty script, and the clock
    and the context window are put back after it."""
    _simulator_thread.state.reset()
    yield _simulator_thread
    _simulator_thread.state.clock = time.time
    _simulator_thread.state.context_window = 200_000


@pytest.fixture(scope="module")
def browser():
    """One chromium per test module."""
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    b = launch_browser(pw)  # a missing chromium fails here: never a skip
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser):
    """A fresh page; the test fails when the page logged an error or warning (CSP violations, script errors)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    problems: list[str] = []
    pg.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.problems = problems
    yield pg
    ctx.close()
    assert not problems, problems


@pytest.fixture(scope="session")
def demo_daemon(tmp_path_factory):
    """One daemon holding the demo session, shared by the browser tests that only read it:
    (url, the demo's result, the session's calls in order). The demo runs once per test run."""
    import os

    from ctxscope.daemon import start_daemon
    from ctxscope.demo import run_demo_session
    from ctxscope.inspector.store.queries import list_calls, open_db
    from ctxscope.settings import DaemonConfig

    tmp = tmp_path_factory.mktemp("demo")
    old_home = os.environ.get("CTXSCOPE_HOME")
    os.environ["CTXSCOPE_HOME"] = str(tmp / "home")  # the demo's agent keeps its sessions there
    loop = Loop()
    cfg = DaemonConfig(host="127.0.0.1", port=0, db=tmp / "captures.db")
    try:
        daemon = loop.call(start_daemon(cfg))
        result = loop.call(run_demo_session(daemon, cfg.db, lambda _line: None), timeout=120)
    finally:  # only the run needs the home: other tests see the environment they had
        if old_home is None:
            os.environ.pop("CTXSCOPE_HOME", None)
        else:
            os.environ["CTXSCOPE_HOME"] = old_home
    db = open_db(cfg.db)
    try:
        calls = list_calls(db, session=result.session, limit=None, newest_first=False)
    finally:
        db.conn.close()
    yield daemon.url, result, calls
    loop.call(daemon.stop())
    loop.stop()
