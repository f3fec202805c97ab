"""What every abuse case shares: its result, the run's context, and reading the stored calls.

A case that needs the store's final word (an outcome, a secret that must not be there) returns a
``later`` check: it runs once the daemon has stopped gracefully and every call is stored.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

if TYPE_CHECKING:
    import aiohttp
    from abuse_procs import Background, Daemon, RssSampler
    from abuse_upstreams import Upstreams

LABEL_HEADER = "X-Ctxscope-Session"  # the proxy strips it and stores it as the session label


@dataclass
class Result:
    held: bool | None  # None: skipped, not counted
    detail: str
    later: Callable[[Stored], tuple[bool, str]] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Ctx], Awaitable[Result]]
    budget: float  # seconds before the case is cut off and FAILED
    prepare: Callable[[Ctx], Awaitable[None]] | None = None  # before the daemon starts


@dataclass(frozen=True)
class Limits:
    header_timeout: float = 1.0
    body_timeout: float = 2.0
    keepalive_timeout: float = 3.0
    max_connections: int = 64
    max_body_bytes: int = 64 << 20
    max_decoded_bytes: int = 32 << 20
    tunnel_idle_timeout: float = 3.0

    def toml(self) -> str:
        lines = ["[limits]"] + [f"{k} = {v}" for k, v in vars(self).items()]
        return "\n".join(lines) + "\n"


def label(tag: str) -> str:
    return "abuse-" + tag


def tagged(path: str, tag: str) -> str:
    """The path with ``call=TAG`` in its query: how a stored call is found again."""
    return path + ("&" if "?" in path else "?") + "call=" + tag


def row_tag(row: dict) -> str | None:
    for k, v in parse_qsl(row.get("query") or "", keep_blank_values=True):
        if k == "call":
            return v
    return None


def read_calls(db: Path) -> list[dict]:
    """Every stored call's identifying columns, read-only (works while the daemon writes)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        con.row_factory = sqlite3.Row
        cols = "id, session_label, query, path, status, outcome, error"
        return [dict(r) for r in con.execute(f"SELECT {cols} FROM calls")]
    finally:
        con.close()


def count_tag(db: Path, tag: str, *, prefix: bool = False) -> int:
    """Stored calls carrying this tag (or, with ``prefix``, any tag starting so); 0 when the
    store cannot be read yet."""
    if prefix:
        where, params = "query LIKE ?", [f"%call={tag}%"]
    else:
        where, params = (
            "query LIKE ? OR query LIKE ? OR session_label = ?",
            [f"%call={tag}", f"%call={tag}&%", label(tag)],
        )
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            return con.execute(f"SELECT COUNT(*) FROM calls WHERE {where}", params).fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@dataclass
class Stored:
    """The calls of one database after the daemon stopped."""

    rows: list[dict]

    def of(self, tag: str) -> list[dict]:
        return [r for r in self.rows if row_tag(r) == tag or r.get("session_label") == label(tag)]

    def outcome(self, tag: str, wanted: str) -> tuple[bool, str]:
        rows = self.of(tag)
        if not rows:
            return False, f"call {tag} not stored"
        got = sorted({str(r["outcome"]) for r in rows})
        return all(r["outcome"] == wanted for r in rows), f"stored outcome {'/'.join(got)}"


@dataclass
class Ctx:
    """The run: where things are, the processes, and which legit calls must end up stored."""

    work: Path
    limits: Limits
    home: Path
    db: Path
    up: Upstreams
    bg: Background
    sampler: RssSampler
    daemon: Daemon | None = None
    others: list[Daemon] = field(default_factory=list)  # a case's own daemons, killed at the end if left
    session: aiohttp.ClientSession | None = None
    expected: set[str] = field(default_factory=set)  # tags of legit calls on the main daemon
    lost_elsewhere: int = 0  # legit calls missing from a case's own daemon
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # what a case's prepare leaves for it

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def port(self) -> int:
        return self.daemon.port

    def expect(self, tag: str) -> str:
        self.expected.add(tag)
        return tag

    async def http(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict | None = None,
        timeout: float = 30.0,
        base: str | None = None,
    ) -> tuple[int, Any, bytes]:
        """One call through a daemon (status, headers, body); the path is sent as written."""
        import aiohttp
        from multidict import CIMultiDict
        from yarl import URL

        url = URL((base or self.url) + path, encoded=True)
        async with self.session.request(
            method, url, data=body, headers=headers or {}, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            return r.status, CIMultiDict(r.headers), await r.read()

    def sim_token(self) -> str | None:
        try:
            return (self.home / "sim-token").read_text().strip() or None
        except OSError:
            return None


async def wait_stored(db: Path, tag: str, timeout: float, n: int = 1, *, prefix: bool = False) -> bool:
    """Poll the store (read-only) until ``n`` calls with this tag (or tag prefix) are there."""
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(count_tag, db, tag, prefix=prefix) >= n:
            return True
        await asyncio.sleep(0.25)
    return False
