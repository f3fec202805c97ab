"""Scripting a running simulator over HTTP, with its token, and where that token is kept.

``SimulatorControl(base_url, token)`` is what the demo, the benches and other processes use:
the simulator may run in another process (``ctxscope serve`` runs it in a child), so nothing
reaches into its state. The base URL is the simulator's own (``http://127.0.0.1:PORT``) or a
route to it (``http://127.0.0.1:8787/u/sim``). Plain blocking calls; from async code run them
with ``asyncio.to_thread``.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .access import TOKEN_HEADER

TOKEN_ENV = "CTXSCOPE_SIM_TOKEN"
TOKEN_FILE = "sim-token"  # in $CTXSCOPE_HOME


class SimulatorControlError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"simulator control: HTTP {status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SimulatorControl:
    base_url: str
    token: str
    timeout: float = 30.0

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        parts = urlsplit(self.base_url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=self.timeout)
        headers = {TOKEN_HEADER: self.token, "Accept": "application/json"}
        data = None
        if method == "POST":
            data = json.dumps({} if body is None else body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, parts.path.rstrip("/") + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        if resp.status >= 400:
            error = payload.get("error") if isinstance(payload, dict) else payload
            raise SimulatorControlError(resp.status, str(error))
        return payload

    def reset(self) -> None:
        """Forget the queue, the request log and the prompt cache."""
        self._call("POST", "/_sim/reset")

    def set_script(self, steps: list[dict[str, Any]]) -> int:
        """Replace the queue; returns how many steps are queued."""
        return self._call("POST", "/_sim/script", steps)["queued"]

    def append_script(self, steps: list[dict[str, Any]]) -> int:
        return self._call("POST", "/_sim/script", {"append": steps})["queued"]

    def pending(self) -> list[dict[str, Any]]:
        return self._call("GET", "/_sim/script")

    def requests(self) -> list[dict[str, Any]]:
        """The request log, oldest first (see requestlog.py for what an entry holds)."""
        return self._call("GET", "/_sim/requests")

    def config(self, *, context_window: int | None = None) -> dict[str, Any]:
        """The settings; sets the context window first when given."""
        if context_window is None:
            return self._call("GET", "/_sim/config")
        return self._call("POST", "/_sim/config", {"context_window": context_window})


def token_from_env() -> str:
    """CTXSCOPE_SIM_TOKEN when set (so a script can know it in advance), else a new random one."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)


def write_token_file(path: Path, token: str) -> None:
    """Write the token readable by the owner only (0600), replacing the file in one step."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_token_file(path: Path) -> str:
    return path.read_text().strip()
