"""`ctxscope tail`: the daemon's live feed in the terminal, one line per call as it is stored.

It reads the Server-Sent Events the web UI reads (``/_ctxscope/api/events``, ``web/live.py``) over
plain ``http.client``, so it shows what the pages show, from the same poller; when the daemon goes
away it says so once, waits, finds the daemon again the way every command does
(``daemon_address.py``) and says it is back (docs/architecture.md, "The command line").
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import click

from .daemon_address import daemon_option, find_daemon
from .options import CONTEXT
from .output import fmt_int, fmt_usd, safe_text
from .tables import relation_word, thread_names, verdict_word

EVENTS_PATH = "/_ctxscope/api/events"
SESSION_PATH = "/_ctxscope/api/session"
RETRY_S = 0.5
READ_TIMEOUT_S = 40.0  # the feed sends a keep-alive every 15 s: silence past this is a dead daemon
MAX_EVENT_BYTES = 4 * 1024 * 1024  # 200 brief rows are well under this
TITLE_WIDTH = 28
BREAK_VERDICTS = frozenset({"client_break"})  # a break, as `sessions` counts BREAKS
LOSS_VERDICTS = frozenset({"client_break", "ttl_expired", "provider_miss"})
_VERDICT_COLOUR = {"hit": "green", "expected_write": "cyan", **dict.fromkeys(LOSS_VERDICTS, "red")}


class FeedLost(Exception):
    """The daemon's feed ended or could not be read."""


@dataclass(frozen=True)
class Filters:
    session: str | None = None
    model: str | None = None
    breaks: bool = False
    errors: bool = False

    def keep(self, row: dict) -> bool:
        if self.session and not str(row.get("session") or "").startswith(self.session):
            return False
        if self.model and self.model.lower() not in str(row.get("model") or "").lower():
            return False
        if self.breaks and row.get("cache_verdict") not in BREAK_VERDICTS:
            return False
        return not (self.errors and not is_error(row))


def is_error(row: dict) -> bool:
    status = row.get("status")
    return row.get("outcome") not in (None, "ok") or (isinstance(status, int) and status >= 400)


def colour_wanted(stream: Any) -> bool:
    """Colour on a terminal only, and never with $NO_COLOR set (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _style(text: str, colour: str | None, on: bool, bold: bool = False) -> str:
    return click.style(text, fg=colour, bold=bold) if on and (colour or bold) else text


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def call_line(row: dict, title: str, colour: bool) -> str:
    """One call in one line: time, session title, thread, relation@pointer, verdict, tokens
    (in / cache read / out), lost dollars, latency, status. Captured text is made safe first."""
    started = str(row.get("started_at") or "")
    clock = started[11:19] if len(started) >= 19 else started or "-"
    relation = safe_text(relation_word(row.get("relation")))
    pointer = row.get("pointer")
    where = f"{relation}@{safe_text(pointer)}" if pointer else relation
    verdict = safe_text(verdict_word(row.get("cache_verdict")))
    tokens = (
        f"in {fmt_int(row.get('usage_input'))} read {fmt_int(row.get('usage_cache_read'))} "
        f"out {fmt_int(row.get('usage_output'))}"
    )
    lost = row.get("lost_usd")
    lost_text = f"lost {fmt_usd(lost)}" if lost else "lost -"
    ms = row.get("duration_ms")
    latency = f"{fmt_int(round(ms))} ms" if isinstance(ms, (int, float)) else "- ms"
    status = row.get("status")
    outcome = row.get("outcome")
    state = f"{status if status is not None else '-'}" + (
        f" {safe_text(outcome)}" if outcome not in (None, "ok") else ""
    )
    thread = safe_text(row.get("thread_name") or _short(row.get("thread")))
    parts = [
        _style(clock, None, colour, bold=False),
        _style(_clip(safe_text(title), TITLE_WIDTH).ljust(TITLE_WIDTH), "bright_white", colour, bold=True),
        thread,
        safe_text(row.get("model")),
        _style(where, "yellow" if row.get("relation") == "DIVERGED" else None, colour),
        _style(verdict, _VERDICT_COLOUR.get(str(row.get("cache_verdict"))), colour),
        tokens,
        _style(lost_text, "red" if lost else None, colour),
        latency,
        _style(state, "red" if is_error(row) else "green", colour),
    ]
    return "  ".join(parts)


def _short(thread: Any) -> str:
    text = str(thread or "-")
    return text if len(text) <= 10 else text[-8:]


def read_events(lines: Iterator[bytes]) -> Iterator[tuple[str, Any]]:
    """(event, data) pairs from an SSE byte-line stream; comments and retry lines skipped."""
    event, size = "message", 0
    data: list[str] = []
    for raw in lines:
        size += len(raw)
        if size > MAX_EVENT_BYTES:
            raise FeedLost("an event larger than any the daemon sends")
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                try:
                    yield event, json.loads("\n".join(data))
                except ValueError:
                    raise FeedLost("an event that is not JSON") from None
            event, data, size = "message", [], 0
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


class Feed:
    """One connection to a daemon's event stream (plain http.client: no proxy variables)."""

    def __init__(self, base: str):
        parts = urlsplit(base)
        self.base = base
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn: http.client.HTTPConnection | None = None

    def get_json(self, path: str) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read(MAX_EVENT_BYTES)
            return json.loads(body) if resp.status == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            conn.close()

    def events(self) -> Iterator[tuple[str, Any]]:
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=READ_TIMEOUT_S)
        try:
            self.conn.request("GET", EVENTS_PATH, headers={"Accept": "text/event-stream"})
            resp = self.conn.getresponse()
            if resp.status != 200:
                raise FeedLost(f"the daemon's feed answered HTTP {resp.status}")
            yield from read_events(iter(resp.readline, b""))
            raise FeedLost("the daemon closed its feed")
        except (OSError, http.client.HTTPException) as exc:
            raise FeedLost(f"{type(exc).__name__}: {exc}") from None
        finally:
            self.conn.close()


class Titles:
    """Session titles and thread names, asked of the daemon once per session and thread."""

    def __init__(self, feed: Feed):
        self.feed = feed
        self.titles: dict[str, str] = {}
        self.threads: dict[str, str] = {}

    def title(self, session: str) -> str:
        if session not in self.titles:
            page = self.feed.get_json(f"{SESSION_PATH}?s={quote(session, safe='')}&limit=1")
            title = page.get("title") if isinstance(page, dict) else None
            self.titles[session] = title if isinstance(title, str) and title else session
            self._learn_threads(page)
        return self.titles[session]

    def thread_name(self, session: str, thread: Any) -> str | None:
        if not isinstance(thread, str):
            return None
        if thread not in self.threads:
            page = self.feed.get_json(f"{SESSION_PATH}?s={quote(session, safe='')}&limit=1")
            self._learn_threads(page)
        return self.threads.get(thread)

    def _learn_threads(self, page: Any) -> None:
        threads = page.get("threads") if isinstance(page, dict) else None
        if isinstance(threads, list):
            with contextlib.suppress(KeyError, TypeError, AttributeError):
                self.threads.update(thread_names(threads))


def _echo(text: str, colour: bool) -> None:
    """A line out; a coloured one past the output guard (its captured parts were made safe)."""
    out = getattr(sys.stdout, "inner", sys.stdout) if colour else sys.stdout
    out.write(text + "\n")
    out.flush()


def follow(
    given: str | None,
    filters: Filters,
    as_json: bool,
    say: Callable[[str], None],
) -> None:
    """Print calls from the feed until interrupted; reconnects across daemon restarts."""
    colour = not as_json and colour_wanted(sys.stdout)
    base = find_daemon(given)
    say(f"following {base} (Ctrl-C to stop)")
    lost_since: float | None = None
    while True:
        feed, titles = Feed(base), None
        try:
            for event, data in feed.events():
                if lost_since is not None:
                    say(f"regained the daemon at {base} after {time.monotonic() - lost_since:.1f} s")
                    lost_since = None
                if event != "calls" or not isinstance(data, list):
                    continue
                titles = titles or Titles(feed)
                for row in data:
                    if not isinstance(row, dict) or not filters.keep(row):
                        continue
                    session = str(row.get("session") or "-")
                    title = titles.title(session)
                    row = dict(row, title=title, thread_name=titles.thread_name(session, row.get("thread")))
                    if as_json:
                        _echo(json.dumps(row, ensure_ascii=True, default=str), False)
                    else:
                        _echo(call_line(row, title, colour), colour)
        except FeedLost as exc:
            if lost_since is None:
                lost_since = time.monotonic()
                say(f"lost the daemon at {base} ({exc}); waiting for it to come back")
        base = _wait_for_daemon(given, base)


def _wait_for_daemon(given: str | None, last: str) -> str:
    """The daemon's address once one answers again (this home's may come back on another port)."""
    while True:
        time.sleep(RETRY_S)
        try:
            return find_daemon(given)
        except click.ClickException:
            continue


@click.command(context_settings=CONTEXT)
@daemon_option
@click.option("--session", metavar="ID", help="Only this session's calls (an id or its prefix).")
@click.option("--model", metavar="NAME", help="Only calls whose model contains NAME (any case).")
@click.option("--breaks", is_flag=True, help="Only calls that broke the cache (verdict client_break).")
@click.option("--errors", is_flag=True, help="Only failed calls (an HTTP status of 400 or more, or not ok).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per call, one per line.")
def tail(daemon: str | None, session: str | None, model: str | None, breaks: bool, errors: bool, as_json: bool) -> None:
    """Follow the daemon's calls in the terminal as they are stored, one line per call.

    Each line: time, session title, thread, model, relation@pointer, cache verdict, tokens (input,
    cache read, output), lost dollars, latency and status.

    It keeps following across a daemon restart (one line says it lost and regained the daemon).
    Colour only on a terminal and without $NO_COLOR. Messages go to stderr, calls to stdout.
    """
    with contextlib.suppress(KeyboardInterrupt):
        follow(
            daemon,
            Filters(session=session, model=model, breaks=breaks, errors=errors),
            as_json,
            lambda text: click.echo(text, err=True),
        )
