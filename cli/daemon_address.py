"""Where the running daemon is, found one way by every command that talks to it.

``--daemon URL`` (or ``$CTXSCOPE_DAEMON``) when given; else the address the running `ctxscope
serve` recorded in ``$CTXSCOPE_HOME/daemon.json``, used only once the daemon there proves it is
this home's (the launcher's HMAC, ``ctxscope.proxy.defence.identity``); else the default
http://127.0.0.1:8787. Every failure is one line naming the address tried and what to do
(docs/architecture.md, "One daemon per home").
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from .daemon_lock import ADDRESS_FILE, recorded_daemon
from .settings import DEFAULT_HOST, DEFAULT_PORT, home_dir

DAEMON_ENV = "CTXSCOPE_DAEMON"
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
FIX = f"start one with `ctxscope serve`, or pass --daemon URL (or set ${DAEMON_ENV})"

daemon_option = click.option(
    "--daemon",
    "daemon",
    default=None,
    envvar=DAEMON_ENV,
    metavar="URL",
    help=f"The running ctxscope daemon (default: the address `ctxscope serve` recorded in "
    f"$CTXSCOPE_HOME/{ADDRESS_FILE}, else {DEFAULT_URL}; env {DAEMON_ENV}).",
)


@dataclass(frozen=True)
class DaemonAddress:
    url: str
    source: str  # how it was found, for messages


def daemon_address(given: str | None) -> DaemonAddress:
    """The daemon's base URL, from ``given``, the home's record or the default (nothing is checked)."""
    if given:
        return DaemonAddress(given.rstrip("/"), f"--daemon or ${DAEMON_ENV}")
    url = recorded_daemon(home_dir()).get("url")
    if isinstance(url, str) and url.startswith("http://"):
        return DaemonAddress(url.rstrip("/"), f"recorded in {home_dir() / ADDRESS_FILE}")
    return DaemonAddress(DEFAULT_URL, "the default")


def find_daemon(given: str | None, also: str = "") -> str:
    """The base URL of a daemon that answers: ``given`` as it is, else this home's daemon, proved
    with its secret; a ClickException in one line otherwise (``also``: another way out, said last)."""
    try:
        return _find(given)
    except click.ClickException as exc:
        raise click.ClickException(exc.message + also) from None


def _find(given: str | None) -> str:
    where = daemon_address(given)
    if given:
        _reachable(where)
        return where.url
    from ctxscope.proxy.defence.identity import load_secret

    from .daemon_probe import NotCtxscope, probe

    try:
        secret = load_secret(home_dir())
    except OSError as exc:
        raise click.ClickException(f"cannot read this home's daemon secret ({exc}); {FIX}") from None
    try:
        running = probe(where.url, secret)
    except NotCtxscope as exc:
        raise click.ClickException(f"{exc} ({where.source}); {FIX}") from None
    if not running:
        raise click.ClickException(f"no ctxscope daemon answers at {where.url} ({where.source}); {FIX}")
    return where.url


def _reachable(where: DaemonAddress) -> None:
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(where.url)
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        host = None
    if parts.scheme not in ("http", "https") or not host:
        raise click.ClickException(f"--daemon {where.url!r} is not an http:// URL; {FIX}")
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise click.ClickException(
            f"no ctxscope daemon answers at {where.url} ({where.source}: {exc.strerror or exc}); {FIX}"
        ) from None
