"""`ctxscope serve`: the proxy, the capture writer, the built-in simulator and the UI.

The proxy and the UI share this process's event loop; the capture writer and the built-in
simulator each run in a child process, so neither storing a call nor answering a huge prompt
can pause forwarding."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ctxscope.inspector.base import owner_only
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.protocol import Writer
from ctxscope.proxy.forward.forwarder import Forwarder, ProxySettings
from ctxscope.proxy.server import create_proxy_app, make_runner, settle_gc
from ctxscope.simulator.control.client import SimulatorControl
from ctxscope.simulator.control.token import TOKEN_FILE, token_from_env, write_token_file
from ctxscope.simulator.process import SimulatorProcess
from ctxscope.vocab.heap import tune_heap
from ctxscope.web.routes import add_web_routes

from .daemon_lock import DaemonLock, LockError, acquire
from .settings import DaemonConfig, home_dir, load_salt, prices_path, secure_home

if TYPE_CHECKING:
    from ctxscope.inspector.otlp.loop import OtlpExport

log = logging.getLogger("ctxscope.daemon")

# The writer's analyses, named for its child, which imports them: this process never does
# (docs/architecture.md, "Memory").
WRITER_ANALYZERS = "ctxscope.inspector.pipeline.search_index:writer_analyzers"
HEAP_ARENAS = 1  # malloc arenas of the daemon's C heap (``run``)
# Routes a test or an embedding adds to the daemon's app before it starts: (app, config, writer).
ExtraRoutes = Callable[[web.Application, DaemonConfig, Writer], None]


class BuiltinSimulator:
    """The built-in simulator at ``/u/sim``, started in its child process on its first request:
    a daemon that never serves it does not carry its ~40 MB (docs/architecture.md, "Memory").

    Its token is CTXSCOPE_SIM_TOKEN or a new random one, written owner-only to
    $CTXSCOPE_HOME/sim-token when the daemon starts, so it can be scripted before it runs. A
    simulator that cannot start costs /u/sim (said in the log, tried again on the next request),
    never the proxy."""

    def __init__(self, *, provider_itself: bool = True) -> None:
        # False (``[provider_itself] sim = false``): it keys Claude Code's billing header like an
        # Anthropic-compatible endpoint, as the analysis then judges its calls
        self.provider_itself = provider_itself
        self.token, path = token_from_env(), sim_token_path()
        self.token_file: Path | None = path
        try:
            write_token_file(path, self.token)
        except OSError as exc:
            log.error(
                "cannot write the simulator's control token to %s (%s): set CTXSCOPE_SIM_TOKEN to script /u/sim",
                path,
                exc,
            )
            self.token_file = None
        self.process: SimulatorProcess | None = None  # while it runs
        self._starting: asyncio.Lock | None = None
        self._stopped = False

    @property
    def url(self) -> str | None:
        return self.process.url if self.process is not None else None

    async def start(self) -> str | None:
        """Its base URL, starting it first if it is not running; None when it cannot start."""
        if self.process is not None and self.process.alive():
            return self.process.url
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:  # the first requests wait for one child, not one each
            if self._stopped:
                return None
            if self.process is not None and self.process.alive():
                return self.process.url
            proc = SimulatorProcess(self.token, token_file=self.token_file)
            try:
                url = await asyncio.to_thread(proc.start)
            except (OSError, RuntimeError) as exc:
                log.error("the built-in simulator did not start (%s): /u/sim is not available", exc)
                return None
            if not self.provider_itself:
                try:
                    await asyncio.to_thread(proc.control().config, provider_itself=False)
                except (OSError, RuntimeError) as exc:
                    log.error("the built-in simulator did not take its settings (%s): /u/sim is not available", exc)
                    await asyncio.to_thread(proc.stop)
                    return None
            if self._stopped:  # the daemon stopped while it started
                await asyncio.to_thread(proc.stop)
                return None
            self.process = proc
            return url

    def control(self) -> SimulatorControl:
        """Its control client (``await start()`` first)."""
        assert self.process is not None, "the simulator is not running: await start() first"
        return self.process.control()

    def stop(self) -> None:
        self._stopped = True
        if self.process is not None:
            self.process.stop()


@dataclass
class RunningDaemon:
    """Handles of a started daemon, for tests and embedding."""

    url: str
    writer: Writer
    runner: web.AppRunner
    sim: BuiltinSimulator | None  # the built-in simulator (None: `sim` is a configured upstream)
    otlp: OtlpExport | None = None  # the OTLP export's thread (None: export is off)

    @property
    def sim_url(self) -> str | None:
        return self.sim.url if self.sim is not None else None

    @property
    def sim_token(self) -> str | None:
        return self.sim.token if self.sim is not None else None

    async def stop(self) -> None:
        """Stop accepting, finish open exchanges, then drain the writer so nothing is lost (what the
        export has not sent yet goes at the next start: its position is in the database)."""
        await self.runner.cleanup()
        stops: list[Awaitable[object]] = [asyncio.to_thread(self.writer.stop)]
        if self.otlp is not None:  # (a request in flight to a hanging collector ends at its timeout)
            stops.append(asyncio.to_thread(self.otlp.stop))
        if self.sim is not None:  # the simulator's child stops while the writer drains
            stops.append(asyncio.to_thread(self.sim.stop))
        await asyncio.gather(*stops)


def sim_token_path() -> Path:
    """Where serve and sim write the simulator's control token (owner-only)."""
    return home_dir() / TOKEN_FILE


def _prepare_files(cfg: DaemonConfig) -> bytes:
    """Home and database folder owner-only, and the key-fingerprint salt. Nothing here stops the
    daemon: forwarding works without a store (said loudly), and without the home's salt
    (fingerprints then differ from other runs)."""
    home = home_dir()
    try:
        secure_home(home)
    except OSError as exc:
        log.error("cannot create ctxscope's home %s: %s", home, exc)
    try:
        if not cfg.db.parent.exists():
            owner_only.private_dir(cfg.db.parent)
    except OSError as exc:
        log.error(
            "cannot create the capture database's folder %s: %s; forwarding works, captures wait", cfg.db.parent, exc
        )
    try:
        return load_salt(home)
    except OSError as exc:
        log.error(
            "cannot read or create the key-fingerprint salt in %s (%s): using a salt for this run only", home, exc
        )
        return secrets.token_bytes(32)


async def start_daemon(
    cfg: DaemonConfig, *, extra_routes: ExtraRoutes | None = None, web_ui: bool = True, reads_in_child: bool = False
) -> RunningDaemon:
    """Start everything; a capture store that cannot be opened is reported, not fatal. ``reads_in_child``
    (``serve``): the UI's store reads run in a child stopped when idle (``web/reader.py``)."""
    salt = _prepare_files(cfg)
    upstreams = dict(cfg.upstreams)
    on_demand: dict[str, Callable[[], Awaitable[str | None]]] = {}
    sim = None
    if "sim" not in upstreams:  # the built-in simulator is always there unless the user renamed it away
        sim = BuiltinSimulator(provider_itself=cfg.provider_itself.get("sim", True))
        on_demand["sim"] = sim.start
    try:
        prices = prices_path()
        prices_args = (str(prices) if prices is not None else "", cfg.provider_itself_text())
        writer: Writer
        if cfg.writer == "thread":
            writer = _thread_writer(cfg, prices_args)
        else:  # a low-priority child process: storing and analysing never holds this loop's GIL
            writer = WriterProcess(
                cfg.db,
                analyzers_factory=WRITER_ANALYZERS,
                analyzers_args=prices_args,
                max_decoded_bytes=cfg.limits.max_decoded_bytes,
                max_spool_bytes=cfg.limits.max_spool_bytes,
                spool_disk_reserve=cfg.limits.spool_disk_reserve,
                idle_release=cfg.limits.idle_release,
            )
            await asyncio.to_thread(writer.start)
    except BaseException:
        if sim is not None:
            await asyncio.to_thread(sim.stop)
        raise
    stats = writer.stats()
    if not stats.running or stats.store_down_since is not None:
        log.error(
            "CAPTURE IS NOT STORING: %s. Forwarding works; captured calls wait and storing is retried "
            "(`ctxscope db status` and the web UI show the state)",
            stats.last_error,
        )
    forwarder = Forwarder(
        ProxySettings(
            upstreams=upstreams,
            salt=salt,
            limits=cfg.limits,
            on_demand=on_demand,
            allow_remote=cfg.allow_remote,
            ask_diagnosis=cfg.ask_diagnosis,
        ),
        writer,
    )
    app = create_proxy_app(forwarder, ca_folder=home_dir() / "ca")
    if web_ui:
        add_web_routes(
            app,
            cfg.db,
            writer,
            cfg.remote_key if cfg.allow_remote else None,
            home=home_dir(),
            idle_release=cfg.limits.idle_release,
            reads_in_child=reads_in_child,
        )
    if extra_routes is not None:
        extra_routes(app, cfg, writer)
    runner = make_runner(app, cfg.limits)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        if sim is not None:
            await asyncio.to_thread(sim.stop)
        writer.stop()
        raise
    port = runner.addresses[0][1] if cfg.port == 0 else cfg.port
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    return RunningDaemon(f"http://{host}:{port}", writer, runner, sim, start_export(cfg, writer))


def _thread_writer(cfg: DaemonConfig, prices_args: tuple[str, ...]) -> Writer:
    """The writer in a thread of this process (tests and embedding): it stores and analyses here,
    so it imports the store and the analyses, which the default child spares this process."""
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.writer.storing.thread import CaptureWriter

    writer = CaptureWriter(
        cfg.db, analyzers=writer_analyzers(*prices_args), max_decoded_bytes=cfg.limits.max_decoded_bytes
    )
    writer.start()
    return writer


def start_export(cfg: DaemonConfig, writer: Writer | None = None) -> OtlpExport | None:
    """The OTLP export's thread when one is configured: it reads the store after the writer, so
    forwarding and storing never wait on it (docs/architecture.md, "Export to OpenTelemetry")."""
    if cfg.export is None:
        return None
    from ctxscope.inspector.otlp.loop import OtlpExport  # the SDK loads only when export is on

    try:
        export = OtlpExport(cfg.db, cfg.export)
        export.start()
        if writer is not None:
            writer.on_stored = export.wake
    except Exception as exc:  # export is an add-on: it must not keep the proxy down
        log.error("the OTLP export to %s did not start (%s): calls are stored, not exported", cfg.export.endpoint, exc)
        return None
    log.info("exporting stored calls as OTLP spans to %s", cfg.export.endpoint)
    return export


async def serve_forever(
    cfg: DaemonConfig,
    *,
    announce: Callable[[RunningDaemon], None],
    stopping: Callable[[int, bool], None] | None = None,
    extra_routes: ExtraRoutes | None = None,
) -> None:
    """Run until SIGINT/SIGTERM/SIGHUP, then shut down cleanly (the writer drains before we exit).

    SIGHUP is what a closed terminal sends: it ends the daemon like Ctrl-C, not mid-write. The
    handlers are in place before the daemon starts, so a signal during start-up stops it cleanly
    too instead of killing it with its children."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    lock = lock_home_and_db(cfg)  # before the simulator's token or the database is touched
    try:
        daemon = await start_daemon(cfg, extra_routes=extra_routes, reads_in_child=True)
        try:
            lock.record(daemon.url, cfg.db)
        except OSError as exc:
            log.error(
                "cannot record the daemon's address in %s (%s): other commands need --daemon %s",
                lock.home,
                exc,
                daemon.url,
            )
        settle_gc()  # this process serves until it ends: start-up objects need no more collecting
        announce(daemon)
        try:
            await stop.wait()
        finally:
            if stopping is not None:  # (calls waiting to be stored, whether the store is failing)
                stats = daemon.writer.stats()
                stopping(stats.queued, stats.store_down_since is not None)
            await daemon.stop()
    finally:
        lock.release()


def lock_home_and_db(cfg: DaemonConfig) -> DaemonLock:
    """This daemon's hold on its home and its database (docs/architecture.md, "One daemon per
    home"); AlreadyRunning when another daemon has either, OSError when they cannot be made."""
    home = home_dir()
    try:
        secure_home(home)
        if not cfg.db.parent.exists():
            with contextlib.suppress(OSError):  # the store says why it cannot open; forwarding goes on
                owner_only.private_dir(cfg.db.parent)
        return acquire(home, cfg.db)
    except OSError as exc:
        raise LockError(f"cannot lock ctxscope's home {home} or the database {cfg.db} for this daemon: {exc}") from None


def run(coro: Coroutine[Any, Any, None]) -> None:
    """asyncio.run, on uvloop when it is installed, with the C heap in one arena: the daemon's hot
    path runs on the loop's thread, and its other threads' allocations are few, so one arena costs
    no throughput and keeps a burst's fragments in one place (docs/architecture.md, "Memory")."""
    tune_heap(HEAP_ARENAS)
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)
