"""`ctxscope run -- COMMAND`: run a program with its LLM clients pointed at the daemon.

The daemon on the configured port is used when one answers there; otherwise one is started in
the background (its own session, output to ``$CTXSCOPE_HOME/daemon.log``) and left running, so
the UI address printed at the end stays usable. The program's calls carry a session label in
their path (docs/architecture.md, "The launcher").
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

import click

from .daemon_address import daemon_address, daemon_option
from .daemon_probe import NotCtxscope, daemon_url, probe
from .forward_proxy_env import proxy_environment
from .options import CONTEXT, db_option
from .settings import build_config, ensure_home, is_loopback

START_TIMEOUT = 30.0  # seconds a fresh daemon may take to answer
MAX_ANSWER_BYTES = 4 << 20  # a session's first page, after the daemon proved itself


def start_daemon_process(serve_args: list[str], url: str, home: Path, secret: bytes) -> tuple[int, Path]:
    """Start `ctxscope serve` detached and wait until it proves it answers; (pid, log file)."""
    log_path = home / "daemon.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from ctxscope.main import main; main()", "serve", *serve_args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
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


SIM_ROUTE = "u/sim"  # the daemon's built-in simulator (docs/architecture.md, "Memory")
DUMMY_KEYS = {
    "ANTHROPIC_API_KEY": "sk-ant-ctxscope-sim",
    "OPENAI_API_KEY": "sk-ctxscope-sim",
    "GEMINI_API_KEY": "ctxscope-sim",
}
PROXY_PASSWORD = "ctxscope"  # any: undici and requests send no Proxy-Authorization for a user without one
SETTLE_TIMEOUT = 10.0  # seconds the launcher waits for the daemon to store the command's calls


def base_urls(url: str, label: str, sim: bool = False) -> dict[str, str]:
    """Provider -> the base URL with the label in the path (all three at the simulator with ``sim``)."""
    base = f"{url}/s/{quote(label, safe='')}"
    if sim:
        return {"anthropic": f"{base}/{SIM_ROUTE}", "openai": f"{base}/{SIM_ROUTE}/v1", "gemini": f"{base}/{SIM_ROUTE}"}
    return {"anthropic": f"{base}/anthropic", "openai": f"{base}/openai/v1", "gemini": f"{base}/gemini"}


def client_environment(url: str, label: str, sim: bool = False) -> dict[str, str]:
    """The variables that point known clients at the daemon, with the label in the path."""
    bases = base_urls(url, label, sim)
    return {
        "ANTHROPIC_BASE_URL": bases["anthropic"],
        "OPENAI_BASE_URL": bases["openai"],
        "GOOGLE_GEMINI_BASE_URL": bases["gemini"],
    }


def labelled_proxy_url(url: str, label: str) -> str:
    """The daemon as an HTTPS proxy whose user part is ``label``: clients send it as
    ``Proxy-Authorization: Basic`` on every CONNECT, and the daemon files each call inside the
    tunnel under it (docs/architecture.md, "The forward proxy carries the launcher's label")."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{quote(label, safe='')}:{PROXY_PASSWORD}@{rest}"


def launch_environment(
    environ: dict[str, str], url: str, label: str, proxy: dict[str, str], sim: bool = False
) -> dict[str, str]:
    """COMMAND's environment: base URLs, the labelled forward proxy (both spellings of each
    variable, since clients read one or the other), Node's own fetch told to use it, and with
    ``sim`` a dummy key for each provider that has none."""
    env = {**environ, **proxy, **client_environment(url, label, sim)}
    for name in ("HTTPS_PROXY", "NO_PROXY"):
        env.pop(name.lower(), None)
    env["HTTPS_PROXY"] = env["https_proxy"] = labelled_proxy_url(url, label)
    env["no_proxy"] = env["NO_PROXY"]
    env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24's fetch reads the proxy variables only when told to
    if sim:
        for name, value in DUMMY_KEYS.items():
            if not env.get(name):
                env[name] = value
    return env


def client_arguments(argv: list[str], url: str, label: str, sim: bool = False) -> list[str]:
    """``argv`` with the setting a known client reads instead of the base-URL variables, given on
    its command line so no file of the user's changes: Codex reads ``openai_base_url`` from its
    config (``-c`` overrides it for this run only), not ``OPENAI_BASE_URL``."""
    if argv and Path(argv[0]).name == "codex":
        value = json.dumps(base_urls(url, label, sim)["openai"])
        return [argv[0], "-c", f"openai_base_url={value}", *argv[1:]]
    return argv


def _get_json(url: str, path: str, timeout: float = 5.0) -> tuple[int, object]:
    """GET ``path`` on the proved daemon (plain ``http.client``, no proxy variables)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(MAX_ANSWER_BYTES)
    finally:
        conn.close()
    try:
        return resp.status, json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return resp.status, None


def _queued(url: str) -> int:
    status, data = _get_json(url, "/_ctxscope/api/status?store=0")
    writer = data.get("writer") if isinstance(data, dict) else None
    queued = writer.get("queued") if isinstance(writer, dict) else None
    return queued if isinstance(queued, int) and status == 200 else 0


def session_recorded(url: str, label: str, timeout: float = SETTLE_TIMEOUT) -> bool:
    """Whether the daemon's store holds a session named exactly ``label``, once the calls the
    daemon has queued are stored (at most ``timeout`` seconds): the launcher prints an address only
    for a session that exists. A second look after a short pause catches a call the daemon was
    still recording when the command ended."""
    deadline = time.monotonic() + timeout
    path = f"/_ctxscope/api/session?s={quote(label, safe='')}&limit=1"
    for attempt in range(2):
        while _queued(url) and time.monotonic() < deadline:
            time.sleep(0.1)
        status, data = _get_json(url, path)
        if status == 200 and isinstance(data, dict) and data.get("session") == label:
            return True
        if attempt == 0:
            time.sleep(0.5)
    return False


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
@daemon_option
@click.option("--host", default=None, help="Address for a daemon this command starts (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port for a daemon this command starts (default 8787).")
@db_option
@click.option(
    "--upstream",
    "upstreams",
    multiple=True,
    metavar="NAME=URL",
    help="Upstreams for a daemon this command starts (as `ctxscope serve --upstream`).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Config file for a daemon this command starts (as `ctxscope serve --config`).",
)
@click.option(
    "--sim",
    is_flag=True,
    help="Point the command at the daemon's built-in simulator (/u/sim), with a dummy key where none is set.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    label: str | None,
    daemon: str | None,
    host: str | None,
    port: int | None,
    db_path: Path | None,
    upstreams: tuple[str, ...],
    config_file: Path | None,
    sim: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with ANTHROPIC_BASE_URL, OPENAI_BASE_URL and GOOGLE_GEMINI_BASE_URL pointing at the
    daemon (started if none runs), HTTPS_PROXY (the label as its user) with the CA
    variables of `ctxscope ca env` for clients without a base URL, and Codex's `openai_base_url`
    as a `-c` override; then print the session's UI address if it made a call.

    Example: ctxscope run --label fix-tests -- claude -p "fix the failing test"
    """
    label = label or default_label(command[0])
    if ":" in label or len(label) > 200 or any(ord(ch) < 32 or ord(ch) == 127 for ch in label):
        raise click.ClickException(
            "--label must be at most 200 characters, without ':' or control characters "
            "(it travels as the user of the forward proxy's URL)"
        )
    try:
        cfg = build_config(
            config_file=config_file, host=host, port=port, db=db_path, upstream_options=upstreams, allow_remote=False
        )
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    where = daemon_address(daemon)  # --daemon, $CTXSCOPE_DAEMON or the address serve recorded
    if daemon or (host is None and port is None and where.source != "the default"):
        parts = urlsplit(where.url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise click.ClickException(f"{where.url} ({where.source}) is not http://HOST:PORT")
        cfg = dataclasses.replace(cfg, host=parts.hostname, port=parts.port)
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
            click.echo(
                f"ctxscope: a daemon already runs at {url}; --upstream, --config and --db are not applied", err=True
            )
    else:
        serve_args = ["--host", cfg.host, "--port", str(cfg.port)]
        if db_path is not None:
            serve_args += ["--db", str(db_path)]
        if config_file is not None:
            serve_args += ["--config", str(config_file)]
        for text in upstreams:
            serve_args += ["--upstream", text]
        pid, log_path = start_daemon_process(serve_args, url, home, secret)
        click.echo(f"ctxscope: started the daemon at {url} (pid {pid}, log {log_path}); it keeps running", err=True)
    env = launch_environment(dict(os.environ), url, label, proxy_environment(url, cfg.upstreams), sim)
    code = _run_child(client_arguments(list(command), url, label, sim), env)
    try:
        recorded = session_recorded(url, label)
    except (OSError, http.client.HTTPException) as exc:
        click.echo(f"ctxscope: cannot ask the daemon at {url} for session {label!r}: {exc}", err=True)
    else:
        if recorded:
            click.echo(f"ctxscope: session {label!r}: {url}/#/session/{quote(label, safe='')}", err=True)
        else:
            click.echo(f"ctxscope: no calls were recorded under {label!r}", err=True)
    sys.exit(code if code >= 0 else 128 - code)
