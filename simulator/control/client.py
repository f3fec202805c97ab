"""Scripting a running simulator over HTTP, with its token (kept as ``token.py`` says).

``SimulatorControl(base_url, token)`` is what the demo, the benches and other processes use:
the simulator may run in another process (``ctxscope serve`` runs it in a child), so nothing
reaches into its state. The base URL is the simulator's own (``http://127.0.0.1:PORT``) or a
route to it (``http://127.0.0.1:8787/u/sim``). Plain blocking calls; from async code run them
with ``asyncio.to_thread``.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ctxscope.simulator.control.access import TOKEN_HEADER


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
        """The request log, oldest first (see control/requestlog.py for what an entry holds)."""
        return self._call("GET", "/_sim/requests")

    def config(
        self,
        *,
        context_window: int | None = None,
        clock: float | bool | None = False,
        provider_itself: bool | None = None,
    ) -> dict[str, Any]:
        """The settings; sets the context window, the clock (unix seconds, None: real time) and
        whether it plays Anthropic's own API (False: an Anthropic-compatible endpoint) when given."""
        body: dict[str, Any] = {} if context_window is None else {"context_window": context_window}
        if clock is not False:
            body["clock"] = clock
        if provider_itself is not None:
            body["provider_itself"] = provider_itself
        return self._call("POST", "/_sim/config", body) if body else self._call("GET", "/_sim/config")
