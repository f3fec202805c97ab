"""`ctxscope status` and `ctxscope stop`: the running daemon of this home, looked at and stopped.

Both start from what `serve` recorded (``daemon.json``: pid, address, database) and believe it
only once the daemon at that address proves it holds this home's secret (``daemon_probe.py``);
`stop` signals the recorded pid only when the home's lock file names the same pid and the process
is this user's, so a stale record whose pid was reused is never signalled (docs/architecture.md,
"One daemon per home").
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from .daemon_lock import ADDRESS_FILE, LOCK_FILE, MAX_RECORD_BYTES, recorded_daemon
from .options import CONTEXT, json_option
from .output import emit_fields, emit_json, fmt_int
from .settings import home_dir

NOT_RUNNING = 3  # `status`'s exit code when no daemon runs for this home (as LSB init scripts say)
STATUS_PATH = "/_ctxscope/api/status"
MAX_STATUS_BYTES = 64 * 1024


@dataclass(frozen=True)
class Running:
    pid: int
    url: str
    db: str | None


def _lock_holder(home: Path) -> int | None:
    """The pid the home's lock file names while a process holds its flock, else None."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:  # a shared lock is refused while the daemon holds its exclusive one
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                record = json.loads(os.pread(fd, MAX_RECORD_BYTES, 0) or b"{}")
            except (OSError, ValueError, UnicodeDecodeError):
                return None
            pid = record.get("pid") if isinstance(record, dict) else None
            return pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def find_running(home: Path) -> tuple[Running | None, str]:
    """This home's daemon when it runs and proves itself, else None and why not (one line)."""
    from ctxscope.proxy.defence.identity import load_secret

    from .daemon_probe import NotCtxscope, probe

    record = recorded_daemon(home)
    pid, url = record.get("pid"), record.get("url")
    if not isinstance(pid, int) or not isinstance(url, str) or not url.startswith("http://"):
        return None, f"no ctxscope daemon is running for {home} (no {ADDRESS_FILE} there)"
    try:
        proved = probe(url, load_secret(home))
    except NotCtxscope as exc:
        return None, f"the daemon recorded in {home / ADDRESS_FILE} is not running: {exc}"
    except OSError as exc:
        return None, f"cannot read this home's daemon secret: {exc}"
    if not proved:
        return None, f"no ctxscope daemon answers at {url} (recorded in {home / ADDRESS_FILE}: it stopped)"
    db = record.get("db")
    return Running(pid, url, db if isinstance(db, str) else None), ""


def _uptime(pid: int) -> float | None:
    """Seconds since ``pid`` started (Linux /proc), None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return max(0.0, time.time() - (boot + ticks / os.sysconf("SC_CLK_TCK")))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days} d {hours} h {minutes} min"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def _daemon_status(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=10)
    try:
        conn.request("GET", STATUS_PATH)
        resp = conn.getresponse()
        data = json.loads(resp.read(MAX_STATUS_BYTES)) if resp.status == 200 else {}
    except (OSError, http.client.HTTPException, ValueError):
        data = {}
    finally:
        conn.close()
    return data if isinstance(data, dict) else {}


@click.command(context_settings=CONTEXT)
@json_option
def status(as_json: bool) -> None:
    """Whether a daemon runs for this home, and how it is doing.

    Its address, pid, uptime, calls stored, writer backlog and database ($CTXSCOPE_HOME's daemon).
    Exit code 0 when one runs, 3 when none does."""
    home = home_dir()
    running, why = find_running(home)
    if running is None:
        if as_json:
            emit_json({"running": False, "home": str(home), "reason": why})
        else:
            click.echo(why)
        raise SystemExit(NOT_RUNNING)
    answer = _daemon_status(running.url)
    writer: dict[str, Any] = answer["writer"] if isinstance(answer.get("writer"), dict) else {}
    store: dict[str, Any] = answer["store"] if isinstance(answer.get("store"), dict) else {}
    uptime = _uptime(running.pid)
    report = {
        "running": True,
        "home": str(home),
        "url": running.url,
        "pid": running.pid,
        "uptime_s": round(uptime, 1) if uptime is not None else None,
        "calls_stored": store.get("calls"),
        "sessions": store.get("sessions"),
        "last_capture_at": store.get("last_capture_at"),
        "writer_backlog": writer.get("queued"),
        "writer_failures": writer.get("failures"),
        "store_error": store.get("error"),
        "db": running.db,
    }
    if as_json:
        emit_json(report)
        return
    backlog = writer.get("queued")
    emit_fields(
        [
            ("daemon", f"running at {running.url}"),
            ("pid", str(running.pid)),
            ("uptime", duration(uptime)),
            ("calls stored", fmt_int(store.get("calls")) if "error" not in store else f"unknown ({store['error']})"),
            ("sessions", fmt_int(store.get("sessions"))),
            ("last capture", str(store.get("last_capture_at") or "-")),
            (
                "writer backlog",
                f"{fmt_int(backlog)} waiting to be stored" if backlog is not None else "-",
            ),
            ("writer failures", fmt_int(writer.get("failures"))),
            ("database", running.db or "-"),
            ("home", str(home)),
        ]
    )


def _gone(pid: int, home: Path) -> bool:
    """The daemon let go of the home's lock, or its process is gone (or a zombie)."""
    if _lock_holder(home) != pid:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _owned_by_me(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        return False


@click.command(context_settings=CONTEXT)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=90.0,
    show_default=True,
    help="Seconds to wait for it to finish its open calls and store what it holds.",
)
def stop(timeout: float) -> None:
    """Stop this home's daemon gracefully and wait until it is gone.

    SIGTERM: it finishes its open calls and stores what it holds. Exit code 0 when it stopped or none
    was running, 1 when it would not stop in time or is not this user's."""
    home = home_dir()
    running, why = find_running(home)
    if running is None:
        click.echo(why)
        return
    holder = _lock_holder(home)
    if holder != running.pid or not _owned_by_me(running.pid):
        raise click.ClickException(
            f"the daemon at {running.url} answers, but pid {running.pid} recorded in {home / ADDRESS_FILE} "
            f"does not hold {home / LOCK_FILE} as this user's process; not signalling it"
        )
    try:
        os.kill(running.pid, signal.SIGTERM)
    except ProcessLookupError:
        click.echo(f"the daemon (pid {running.pid}) is gone")
        return
    click.echo(f"stopping the daemon at {running.url} (pid {running.pid})...")
    deadline = time.monotonic() + timeout
    while not _gone(running.pid, home):
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"the daemon (pid {running.pid}) is still running after {timeout:g} s; "
                f"see {home / 'daemon.log'} or its terminal"
            )
        time.sleep(0.1)
    click.echo("stopped")
