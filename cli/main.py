"""The `ctxscope` command: the single composition root that wires proxy, store, inspector and agent."""

from __future__ import annotations

import contextlib
import importlib
import logging
from pathlib import Path
from typing import Any

import click

from . import __version__
from .options import CONTEXT, db_option
from .settings import DEFAULT_HOST, DEFAULT_PORT, build_config, is_loopback

# Every command but serve and sim, loaded when it runs: (where it is declared, its help's first sentence,
# which `ctxscope --help` lists without importing it; a test keeps the two the same).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "advise": (
        "ctxscope.investigate.advise_commands:advise",
        "Replay SESSION's prompts through the provider's cache rules without each cause of cache misses.",
    ),
    "agent": (
        "ctxscope.agent_commands:agent_group",
        "Run the ctxscope coding agent (its calls go through the local proxy unless --direct).",
    ),
    "ca": ("ctxscope.ca_commands:ca", "The local certificate authority of the forward proxy (created on first use)."),
    "calls": ("ctxscope.query_commands:calls", "List captured calls, optionally filtered by their analysis."),
    "curl": (
        "ctxscope.investigate.export_commands:curl",
        "Print a runnable curl command that re-sends CALL's request (CALL is an id or a unique prefix).",
    ),
    "db": ("ctxscope.db_commands:db", "The capture database: where it is and how it is doing."),
    "demo": (
        "ctxscope.demo:demo",
        "Start the daemon and run a scripted agent session that shows every effect in the inspector.",
    ),
    "diff": (
        "ctxscope.analysis_commands:diff",
        "Compare call A's prompt with call B's (default: A's predecessor): first difference first.",
    ),
    "export": (
        "ctxscope.investigate.export_commands:export_session",
        "Write SESSION's calls (an id or a unique prefix) to a file another ctxscope, DevTools or mitmproxy "
        "can open, or with --otlp URL send stored calls to an OpenTelemetry collector.",
    ),
    "findings": (
        "ctxscope.investigate.findings_commands:findings",
        "What wastes SESSION's context (default: the latest session): tokens and dollars at stake, and where.",
    ),
    "import": (
        "ctxscope.investigate.export_commands:import_file",
        "Load a HAR (from ctxscope, mitmproxy or a browser) or a ctxscope bundle into the capture database.",
    ),
    "reindex": (
        "ctxscope.analysis_commands:reindex",
        "Recompute the analysis of stored calls (relations, threads, tokens, cache verdicts, markers).",
    ),
    "replay": (
        "ctxscope.investigate.replay_commands:replay",
        "Re-send CALL's request through the daemon (CALL is an id or a unique prefix).",
    ),
    "run": (
        "ctxscope.run_commands:run",
        "Run COMMAND with ANTHROPIC_BASE_URL, OPENAI_BASE_URL and GOOGLE_GEMINI_BASE_URL pointing at the "
        "daemon (started if none runs), HTTPS_PROXY (the label as its user) with the CA variables of "
        "`ctxscope ca env` for clients without a base URL, and Codex's `openai_base_url` as a `-c` "
        "override; then print the session's UI address if it made a call.",
    ),
    "search": (
        "ctxscope.investigate.search_commands:search",
        "Find TEXT (words, as one phrase) in captured prompts and responses.",
    ),
    "session": (
        "ctxscope.analysis_commands:session",
        "Timeline of one session (SESSION is an id or a unique prefix): relations, tokens, cache, markers.",
    ),
    "sessions": (
        "ctxscope.query_commands:sessions",
        "List sessions with their call and thread counts, models, cache hit rate, breaks and cost lost.",
    ),
    "show": (
        "ctxscope.query_commands:show",
        "Show one call (CALL is an id or a unique prefix of one): its place in the session, relation, cache "
        "verdict, tokens reported and estimated, markers and the answer's first lines.",
    ),
    "status": (
        "ctxscope.daemon_commands:status",
        "Whether a daemon runs for this home, and how it is doing.",
    ),
    "stop": (
        "ctxscope.daemon_commands:stop",
        "Stop this home's daemon gracefully and wait until it is gone.",
    ),
    "tail": (
        "ctxscope.tail_commands:tail",
        "Follow the daemon's calls in the terminal as they are stored, one line per call.",
    ),
    "transcript": (
        "ctxscope.transcript_commands:transcript",
        "Print SESSION's conversation as the model saw it at its last call (or --at CALL).",
    ),
    "stats": (
        "ctxscope.analysis_commands:stats",
        "Cache statistics: calls, hit rate, breaks by cause, tokens and cost lost.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands (``LAZY_COMMANDS``) import their module only when they run or their own
    help is asked for (click's lazy-group pattern), so `ctxscope --help` starts fast and `ctxscope
    serve` carries none of the other commands' modules (docs/architecture.md, "Quick start-up")."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attribute = self.lazy[cmd_name][0].split(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), f"{module}:{attribute} is not a click command"
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command gets the nearest names ("did you mean sessions?") in its usage error."""
        name = click.utils.make_str(args[0]) if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            near = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            if near:
                ctx.fail(f"No such command {name!r}. Did you mean {' or '.join(repr(n) for n in near)}?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, each with its help's first sentence, without loading the lazy ones."""
        listed = [
            (name, self.commands.get(name) or click.Command(name, help=self.lazy[name][1]))
            for name in self.list_commands(ctx)
        ]
        listed = [(name, cmd) for name, cmd in listed if not cmd.hidden]
        if listed:
            limit = formatter.width - 6 - max(len(name) for name, _ in listed)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in listed])


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="ctxscope")
def cli() -> None:
    """ctxscope: see exactly what your LLM agent sends to the model.

    Run `ctxscope serve`, point your agent's base URL at http://127.0.0.1:8787/anthropic
    (or /openai/v1, or /u/NAME/...), and every call is recorded for inspection.
    """
    from ctxscope.proxy.defence.printable import PrintableFormatter

    from .output import guard_stdout

    root = logging.getLogger()
    if not root.handlers:  # (logging.basicConfig, with a formatter that lets no control character through)
        handler = logging.StreamHandler()
        handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    click.get_current_context().call_on_close(guard_stdout())


@cli.command(context_settings=CONTEXT)
@click.option(
    "--host", default=None, help=f"Address to bind (default {DEFAULT_HOST}; loopback only unless --allow-remote)."
)
@click.option("--port", type=int, default=None, help=f"Port to listen on (default {DEFAULT_PORT}).")
@db_option
@click.option(
    "--upstream",
    "upstreams",
    multiple=True,
    metavar="NAME=URL",
    help="Add or override an upstream, reachable at /u/NAME/... (anthropic, openai and gemini override the built-ins).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TOML file with host, port, db, an [upstreams] and a [limits] table.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow binding a non-loopback address (captures hold prompts!); the web UI and its API then "
    "need a key, printed at start (or remote_key in --config).",
)
@click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set an abuse limit (repeatable; also a [limits] table in --config): header_timeout=15, "
    "body_timeout=30, keepalive_timeout=75, shutdown_grace=60 (seconds); max_connections=512; "
    "max_body_bytes=256MiB, max_decoded_bytes=128MiB, max_spool_bytes=1TiB, spool_disk_reserve=1GiB "
    "(bytes, or with KiB/MiB/GiB).",
)
@click.option(
    "--otlp-endpoint",
    default=None,
    metavar="URL",
    help="Export every stored call as an OpenTelemetry span to this OTLP/HTTP collector "
    "(e.g. http://127.0.0.1:4318; also otlp_endpoint in an [export] table of --config).",
)
@click.option(
    "--ask-diagnosis",
    is_flag=True,
    help="Ask Anthropic and OpenAI (Responses) for their own cache diagnosis on the client's behalf: "
    "the bytes sent upstream gain the request field (the capture keeps the client's; also "
    "ask_diagnosis = true in --config).",
)
def serve(
    host: str | None,
    port: int | None,
    db_path: Path | None,
    upstreams: tuple[str, ...],
    config_file: Path | None,
    allow_remote: bool,
    limits: tuple[str, ...],
    otlp_endpoint: str | None,
    ask_diagnosis: bool,
) -> None:
    """Run the capture proxy daemon (with the built-in simulator at /u/sim)."""
    from .daemon import RunningDaemon, run, serve_forever
    from .daemon_lock import LockError

    try:
        cfg = build_config(
            config_file=config_file,
            host=host,
            port=port,
            db=db_path,
            upstream_options=upstreams,
            allow_remote=allow_remote,
            limit_options=limits,
            otlp_endpoint=otlp_endpoint,
            ask_diagnosis=ask_diagnosis,
        )
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not is_loopback(cfg.host) and not cfg.allow_remote:
        raise click.ClickException(
            f"refusing to bind {cfg.host}: captures contain your prompts. Pass --allow-remote if you mean it."
        )

    def announce(daemon: RunningDaemon) -> None:
        click.echo(f"ctxscope {__version__} listening on {daemon.url}  (captures: {cfg.db})")
        click.echo(f"  Web UI:     {daemon.url}/")
        click.echo(f"  Anthropic:  ANTHROPIC_BASE_URL={daemon.url}/anthropic")
        click.echo(f"  OpenAI:     OPENAI_BASE_URL={daemon.url}/openai/v1")
        click.echo(f"  Gemini:     GOOGLE_GEMINI_BASE_URL={daemon.url}/gemini")
        if daemon.sim is not None:
            where = f"in {daemon.sim.token_file}" if daemon.sim.token_file else "not written: set CTXSCOPE_SIM_TOKEN"
            click.echo(
                f"  Simulator:  {daemon.url}/u/sim/v1   (no API key needed; control token, header X-Sim-Token, {where})"
            )
        if cfg.export is not None:
            click.echo(f"  Export:     stored calls as OTLP spans to {cfg.export.endpoint}")
        if cfg.ask_diagnosis:
            click.echo("  Diagnosis:  asking providers for their cache diagnosis (sent bytes gain the request field)")
        for name, url in sorted(cfg.upstreams.items()):
            if name not in ("anthropic", "openai", "gemini"):
                click.echo(f"  {name}: {daemon.url}/u/{name}/ -> {url}")
        if cfg.allow_remote:
            _announce_remote(daemon.url, cfg.remote_key or "", cfg.host)
        click.echo("Press Ctrl-C to stop.")

    def stopping(waiting: int, store_down: bool) -> None:
        calls = f"{waiting} captured call{'s' * (waiting != 1)}"
        if store_down:  # nothing can be stored now: say where the calls wait instead of promising it
            click.echo(
                f"stopping: finishing open calls; the store is failing, so {calls} stay in the spool "
                "for the next `ctxscope serve` on this database"
            )
        elif waiting:
            click.echo(f"stopping: finishing open calls and storing {calls}...")
        else:
            click.echo("stopping: finishing open calls...")

    try:
        run(serve_forever(cfg, announce=announce, stopping=stopping))
    except LockError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        from .demo import port_hint

        raise click.ClickException(f"cannot listen on {cfg.host}:{cfg.port}: {exc}{port_hint(exc)}") from exc


def _announce_remote(url: str, key: str, host: str) -> None:
    """What remote mode exposes, said once at start (docs/architecture.md, "Remote mode needs a key")."""
    where = "every address of this machine" if host in ("0.0.0.0", "::", "") else host
    click.echo(f"REMOTE MODE: listening on {where}, reachable by other machines.")
    click.echo(f"  The web UI and its API need this key (it is shown only now): {key}")
    click.echo(f"    in a browser: open {url}/?key={key} once (it sets a cookie);")
    click.echo("    from scripts: the header X-Ctxscope-Key or Authorization: Bearer with it.")
    click.echo("  The provider routes need no key: any peer that reaches this port can send calls through the")
    click.echo("  configured upstreams (with its own API keys) and they are recorded. The traffic is plain HTTP.")


@cli.command(context_settings=CONTEXT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=8790, show_default=True, help="Port to listen on.")
@click.option(
    "--script",
    "script_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON list of scripted replies, one per model request (the format is below).",
)
def sim(host: str, port: int, script_file: Path | None) -> None:
    """Run the provider simulator alone (Anthropic, OpenAI Chat and Responses wire formats).

    \b
    --script FILE is a JSON list of steps, taken in order, one per model request:
      [{"text": "Hello."},
       {"tool_calls": [{"name": "read", "arguments": {"path": "README.md"}}]},
       {"error": {"status": 429, "retry_after": 1}}]
    Step keys (all optional; an unknown key is an error): text, tool_calls, thinking, empty,
    error, stream_error (+ after_events), reset_after_events, delay_ms, chunk_delay_ms,
    stop_reason, context_window, match (taken only by a request whose last message contains it).
    With no step left, the answer is "sim: <the start of the last user text>", or a small agent
    when the request declares tools.
    """
    import asyncio

    from ctxscope.simulator.app import start_simulator
    from ctxscope.simulator.control.token import TOKEN_FILE, token_from_env, write_token_file
    from ctxscope.simulator.model.script import ScriptError, load_script_file

    from .settings import ensure_home

    if not is_loopback(host):
        raise click.ClickException("the simulator binds loopback addresses only")
    try:
        script = load_script_file(str(script_file)) if script_file else None
    except (ScriptError, ValueError, OSError) as exc:
        raise click.ClickException(f"bad script {script_file}: {exc}") from exc
    token, token_path = token_from_env(), ensure_home() / TOKEN_FILE
    write_token_file(token_path, token)

    async def main() -> None:
        runner, url = await start_simulator(host, port, script=script, control_token=token)
        click.echo(f"ctxscope simulator on {url}  (Anthropic: {url}, OpenAI: {url}/v1). Ctrl-C to stop.")
        click.echo(f"  control endpoints {url}/_sim/...: header X-Sim-Token, the token is in {token_path}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def main() -> None:  # pragma: no cover - console entry
    cli(prog_name="ctxscope")


if __name__ == "__main__":  # pragma: no cover
    main()
