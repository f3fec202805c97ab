"""The parent's handle on a simulator running in a child process (``child.py``).

``ctxscope serve`` runs its built-in simulator this way, off the proxy's event loop and process:
parsing and counting the tokens of a huge prompt then costs the child's CPU, never a pause in
forwarding other calls. ``spawn`` returns at once (the child starts beside the capture writer),
``wait_ready`` reads the address the child bound, ``stop`` closes the pipe the child watches and
waits for it to exit. If the parent dies without stopping it, the closed pipe ends the child.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

from ctxscope.simulator.control.client import SimulatorControl

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class SimulatorProcess:
    def __init__(
        self,
        token: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        context_window: int = 200_000,
        max_body: int | None = None,
        token_file: Path | None = None,
    ) -> None:
        self.token = token
        self.token_file = token_file  # where the token was written for the user, if it was
        self.host = host
        self.port = port
        self.context_window = context_window
        self.max_body = max_body
        self.url: str | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def spawn(self) -> None:
        """Start the child and hand it the token; does not wait for it to listen."""
        argv = [
            sys.executable,
            "-m",
            "ctxscope.simulator",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--context-window",
            str(self.context_window),
        ]
        if self.max_body is not None:
            argv += ["--max-body", str(self.max_body)]
        # Its own process group: a Ctrl-C at the terminal reaches the daemon, which stops it in order,
        # never the child in the middle of its start-up imports (a KeyboardInterrupt traceback).
        proc = self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, process_group=0
        )
        assert proc.stdin is not None  # stdin=PIPE
        proc.stdin.write(self.token.encode() + b"\n")
        proc.stdin.flush()  # the pipe stays open: its end of file tells the child we are gone

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> str:
        """The child's base URL once it listens; RuntimeError (and the child stopped) if it does not."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None, "spawn() first"
        line = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop()
                    raise RuntimeError(f"the simulator did not start within {timeout:g} s")
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    code = proc.wait()
                    raise RuntimeError(f"the simulator exited while starting (exit code {code})")
                line += chunk
        proc.stdout.close()  # the child writes nothing more there
        self.url = json.loads(line)["url"]
        return self.url

    def start(self, timeout: float = READY_TIMEOUT_S) -> str:
        self.spawn()
        return self.wait_ready(timeout)

    def control(self) -> SimulatorControl:
        assert self.url is not None, "the simulator is not running"
        return SimulatorControl(self.url, self.token)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Close the pipe (the child exits after its open streams' short grace), then insist."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None and not proc.stdout.closed:
            proc.stdout.close()
