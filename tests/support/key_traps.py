"""A real HTTP listener on a loopback address that records every request it gets: the trap a
hostile setup points a key at. Tests assert that no key ever arrives in one."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Trap:
    """``answer(seen) -> (status, JSON body)``; every request is kept in ``seen``."""

    host: str = "127.0.0.1"
    answer: Callable[[Seen], tuple[int, object]] = lambda seen: (200, {"writer": None})
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0

    def __enter__(self) -> Trap:
        trap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def setup(self) -> None:
                trap.connections += 1
                super().setup()

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                trap.seen.append(seen)
                status, body = trap.answer(seen)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((self.host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    def keys_seen(self, *keys: str) -> list[str]:
        """Which of ``keys`` reached the trap anywhere: a header, the path or the body."""
        blob = "\n".join(f"{s.path}\n{s.headers}\n{s.body!r}" for s in self.seen)
        return [k for k in keys if k in blob]
