"""`ctxscope serve`: the proxy, the capture writer, the built-in simulator and the UI in one process."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from ctxscope.inspector.writer import CaptureWriter
from ctxscope.inspector.writer_process import WriterProcess
from ctxscope.proxy.forward import Forwarder, ProxySettings
from ctxscope.proxy.server import create_proxy_app, make_runner, settle_gc
from ctxscope.simulator.app import start_simulator
from ctxscope.web.routes import add_web_routes

from .settings import DaemonConfig, home_dir, load_salt

log = logging.getLogger("ctxscope.daemon")

# What runs on every stored call (in the writer), named so the writer's child process can import it.
ANALYZERS = "ctxscope.daemon:writer_analyzers"


@dataclass
class RunningDaemon:
    """Handles of a started daemon, for tests and embedding."""

    url: str
    writer: CaptureWriter | WriterProcess
    runner: web.AppRunner
    sim_runner: web.AppRunner | None
    sim_url: str | None

    async def stop(self) -> None:
        """Stop accepting, finish open exchanges, then drain the writer so nothing is lost."""
        await self.runner.cleanup()
        if self.sim_runner is not None:
            await self.sim_runner.cleanup()
        await asyncio.to_thread(self.writer.stop)


def _analyzer():
    """The inspector's analyzer; a bad price file costs the overrides, not the capture."""
    from .analysis_commands import make_analyzer

    try:
        return make_analyzer()
    except (ValueError, OSError) as exc:
        log.error("ignoring the price file: %s", exc)
        from ctxscope.inspector.analyze import Analyzer

        return Analyzer()


def writer_analyzers() -> list:
    """The analyzers the capture writer runs on every stored call."""
    return [_analyzer()]


async def start_daemon(cfg: DaemonConfig, *, extra_routes=None, web_ui: bool = True) -> RunningDaemon:
    cfg.db.parent.mkdir(parents=True, exist_ok=True)
    upstreams = dict(cfg.upstreams)
    sim_runner = sim_url = None
    if "sim" not in upstreams:  # the built-in simulator is always there unless the user renamed it away
        sim_runner, sim_url = await start_simulator("127.0.0.1", 0)
        upstreams["sim"] = sim_url
    if cfg.writer == "thread":
        writer = CaptureWriter(cfg.db, analyzers=writer_analyzers())
        writer.start()
    else:  # a low-priority child process: storing and analysing never holds this loop's GIL
        writer = WriterProcess(cfg.db, analyzers_factory=ANALYZERS)
        await asyncio.to_thread(writer.start)
    forwarder = Forwarder(ProxySettings(upstreams=upstreams, salt=load_salt(home_dir()), limits=cfg.limits), writer)
    app = create_proxy_app(forwarder)
    if web_ui:
        add_web_routes(app, cfg.db, writer)
    if extra_routes is not None:
        extra_routes(app, cfg, writer)
    runner = make_runner(app, cfg.limits)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        if sim_runner is not None:
            await sim_runner.cleanup()
        writer.stop()
        raise
    port = site._server.sockets[0].getsockname()[1] if cfg.port == 0 else cfg.port
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    return RunningDaemon(f"http://{host}:{port}", writer, runner, sim_runner, sim_url)


async def serve_forever(cfg: DaemonConfig, *, announce, extra_routes=None) -> None:
    """Run until SIGINT/SIGTERM/SIGHUP, then shut down cleanly (the writer drains before we exit).

    SIGHUP is what a closed terminal sends: it ends the daemon like Ctrl-C, not mid-write."""
    daemon = await start_daemon(cfg, extra_routes=extra_routes)
    settle_gc()  # this process serves until it ends: start-up objects need no more collecting
    announce(daemon)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        announce_stop = getattr(announce, "stopping", None)
        if announce_stop:
            announce_stop(daemon.writer.stats().queued)
        await daemon.stop()


def run(coro) -> None:
    """asyncio.run, on uvloop when it is installed."""
    try:
        import uvloop  # type: ignore

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)
