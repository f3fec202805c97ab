"""The simulator as a child process of the daemon, so no request to it can stall forwarding.

Started by ``process.SimulatorProcess``: the control token comes as the first line on stdin (not
in argv or the environment, which other users or child processes may see); the bound address
goes back as one JSON line on stdout. The child then watches stdin: end of file means the parent
is gone (stopped, or killed with SIGKILL, when the kernel closes its end of the pipe), and it
exits. A change of parent pid is watched too, in case a stray copy of the pipe kept it open.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading

from aiohttp import web

from ctxscope.simulator.app import MAX_BODY, create_app, make_runner

PARENT_CHECK_S = 0.5
SHUTDOWN_GRACE_S = 0.5  # open streams get this long when the daemon stops
NICE = 5  # counting a huge prompt's tokens yields the CPU to the proxy on a busy machine


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ctxscope.simulator", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--context-window", type=int, default=200_000)
    p.add_argument("--max-body", type=int, default=MAX_BODY)
    p.add_argument("--nice", type=int, default=NICE)
    return p.parse_args(argv)


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Unbuffered reads of fd 0: a daemon thread blocked in a buffered read holds that buffer's lock,
    and an interpreter finalizing beside it dies of ``_enter_buffered_busy``."""
    try:
        while os.read(0, 4096):
            pass
    except (OSError, ValueError):
        pass
    loop.call_soon_threadsafe(stop.set)


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """Stop when the parent is gone: woken by a pidfd where the kernel has them (an idle simulator
    wakes for nothing), else by looking every PARENT_CHECK_S."""
    try:
        pidfd = os.pidfd_open(parent)
    except (AttributeError, OSError):  # no pidfds here (or the parent is gone already): look now and then
        pidfd = None
    if pidfd is not None:
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(pidfd, gone.set)
        try:
            if os.getppid() == parent:  # it may have gone before the pidfd was opened
                await gone.wait()
            stop.set()
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(PARENT_CHECK_S)


async def serve(args: argparse.Namespace, token: str, parent: int) -> None:
    app = create_app(context_window=args.context_window, control_token=token, max_body=args.max_body)
    runner = make_runner(app, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port).start()
    host, port = runner.addresses[0][:2]
    shown = f"[{host}]" if ":" in host else host
    os.write(1, (json.dumps({"url": f"http://{shown}:{port}", "pid": os.getpid()}) + "\n").encode())
    _quiet_stdout()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    threading.Thread(target=_watch_stdin, args=(loop, stop), name="parent-pipe", daemon=True).start()
    watcher = asyncio.ensure_future(_watch_parent(parent, stop))
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        await runner.cleanup()


def _quiet_stdout() -> None:
    """The parent reads nothing after the address and closes its end: stdout goes to /dev/null, so
    nothing written or flushed there later (at exit) meets a broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def main(argv: list[str] | None = None) -> None:
    # Ctrl-C and a closed terminal's SIGHUP reach the whole process group; the parent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    args = _args(argv)
    parent = os.getppid()
    if args.nice:
        with contextlib.suppress(OSError):  # not allowed here: run at the normal priority
            os.nice(args.nice)
    token = sys.stdin.buffer.readline().decode().strip()
    if not token:
        sys.exit("ctxscope simulator child: no control token on stdin")
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args, token, parent))
    else:
        uvloop.run(serve(args, token, parent))
