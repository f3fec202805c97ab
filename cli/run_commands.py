"""`ctxscope run -- COMMAND`: run a program with its LLM clients pointed at the daemon.

The daemon on the configured port is used when one answers there; otherwise one is started in
the background (its own session, output to ``$CTXSCOPE_HOME/daemon.log``) and left running, so
the UI address printed at the end stays usable. The program's calls carry a session label in
their path (docs/architecture.md, "The launcher").
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import click

from .ca_commands import proxy_environment
from .daemon_probe import NotCtxscope, daemon_url, probe
from .options import CONTEXT, db_option
from .settings import build_config, ensure_home, is_loopback

START_TIMEOUT = 30.0  # seconds a fresh daemon may take to answer
def start_daemon_process(serve_args: list[str], url: str, home: Path, secret: bytes) -> tuple[int, Path]:
    """Start `ctxscope serve` detached and wait until it proves it answers; (pid, log file)."""
    log_path = home / "daemon.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from ctxscope.main import main; main()", "serve", *serve_args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"the daemon exited with {proc.returncode} at start; see {log_path}")
        try:
            if probe(url, secret, timeout=1.0):
                proc.returncode = 0  # it lives on by design: no "still running" warning when this object goes
                return proc.pid, log_path
        except NotCtxscope:
            pass
        time.sleep(0.1)
    proc.terminate()
    proc.wait(10)
    raise click.ClickException(f"the daemon did not answer at {url} within {START_TIMEOUT:.0f}s; see {log_path}")


def client_environment(url: str, label: str) -> dict[str, str]:
    """The variables that point known clients at the daemon, with the label in the path."""
    base = f"{url}/s/{quote(label, safe='')}"
    return {
        "ANTHROPIC_BASE_URL": f"{base}/anthropic",
        "OPENAI_BASE_URL": f"{base}/openai/v1",
        "GOOGLE_GEMINI_BASE_URL": f"{base}/gemini",
    }


def _run_child(argv: list[str], env: dict[str, str]) -> int:
    """Run the command in the foreground and return its exit status. Ctrl-C reaches it (it shares
    the terminal's process group); this process waits for it instead of dying first."""
    try:
        proc = subprocess.Popen(argv, env=env)
    except FileNotFoundError:
        click.echo(f"ctxscope: command not found: {argv[0]}", err=True)
        return 127
    except PermissionError:
        click.echo(f"ctxscope: cannot run {argv[0]}: permission denied", err=True)
        return 126
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def default_label(command: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(command).name).strip("-") or "run"
    return f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@click.command(context_settings={**CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--label", default=None, help="Session label for the command's calls (default: NAME-DATE-TIME).")
@click.option("--host", default=None, help="The daemon's address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="The daemon's port (default 8787).")
@db_option
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=URL",
              help="Upstreams for a daemon this command starts (as `ctxscope serve --upstream`).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Config file for a daemon this command starts (as `ctxscope serve --config`).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(label, host, port, db_path, upstreams, config_file, command):
    """Run COMMAND with ANTHROPIC_BASE_URL, OPENAI_BASE_URL and GOOGLE_GEMINI_BASE_URL pointing at the
    daemon (started if none runs on the port), and HTTPS_PROXY with the CA variables of `ctxscope ca
    env` for clients without a base URL; then print the session's UI address.

    Example: ctxscope run --label fix-tests -- claude -p "fix the failing test"
    """
    try:
        cfg = build_config(config_file=config_file, host=host, port=port, db=db_path,
                           upstream_options=upstreams, allow_remote=False)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not is_loopback(cfg.host):
        raise click.ClickException(f"refusing {cfg.host}: `ctxscope run` uses a loopback daemon only")
    url = daemon_url(cfg)
    try:
        from ctxscope.proxy.defence.identity import load_secret

        home = ensure_home()
        secret = load_secret(home)
    except OSError as exc:
        raise click.ClickException(f"cannot prepare ctxscope's home: {exc}") from None
    try:
        running = probe(url, secret)
    except NotCtxscope as exc:  # before anything starts: the command's keys never go there
        raise click.ClickException(f"{exc}; not running the command: pick another --port") from None
    if running:
        if upstreams or config_file or db_path:
            click.echo(f"ctxscope: a daemon already runs at {url}; --upstream, --config and --db are not applied",
                       err=True)
    else:
        serve_args = ["--host", cfg.host, "--port", str(cfg.port)]
        if db_path is not None:
            serve_args += ["--db", str(db_path)]
        if config_file is not None:
            serve_args += ["--config", str(config_file)]
        for text in upstreams:
            serve_args += ["--upstream", text]
        pid, log_path = start_daemon_process(serve_args, url, home, secret)
        click.echo(f"ctxscope: started the daemon at {url} (pid {pid}, log {log_path}); it keeps running",
                   err=True)
    label = label or default_label(command[0])
    env = {**os.environ, **proxy_environment(url, cfg.upstreams), **client_environment(url, label)}
    code = _run_child(list(command), env)
    click.echo(f"ctxscope: session {label!r}: {url}/#/session/{quote(label, safe='')}", err=True)
    sys.exit(code if code >= 0 else 128 - code)
