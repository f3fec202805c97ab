"""The `ctxscope` command: the single composition root that wires proxy, store, inspector and agent."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import click

from . import __version__
from .analysis_commands import diff, reindex, session, stats
from .ca_commands import ca
from .demo import demo
from .investigate.advise_commands import advise
from .investigate.export_commands import curl, export_session, import_file
from .investigate.findings_commands import findings
from .investigate.replay_commands import replay
from .investigate.search_commands import search
from .options import CONTEXT, db_option
from .query_commands import calls, db, sessions, show
from .run_commands import run as run_command
from .settings import DEFAULT_HOST, DEFAULT_PORT, build_config, is_loopback


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="ctxscope")
def cli():
    """ctxscope: see exactly what your LLM agent sends to the model.

    Run `ctxscope serve`, point your agent's base URL at http://127.0.0.1:8787/anthropic
    (or /openai/v1, or /u/NAME/...), and every call is recorded for inspection.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


@cli.command(context_settings=CONTEXT)
@click.option("--host", default=None,
              help=f"Address to bind (default {DEFAULT_HOST}; loopback only unless --allow-remote).")
@click.option("--port", type=int, default=None, help=f"Port to listen on (default {DEFAULT_PORT}).")
@db_option
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=URL",
              help="Add or override an upstream, reachable at /u/NAME/... "
                   "(anthropic, openai and gemini override the built-ins).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML file with host, port, db, an [upstreams] and a [limits] table.")
@click.option("--allow-remote", is_flag=True, help="Allow binding a non-loopback address (captures hold prompts!).")
@click.option("--limit", "limits", multiple=True, metavar="KEY=VALUE",
              help="Set an abuse limit (repeatable; also a [limits] table in --config): header_timeout=15, "
                   "body_timeout=30, keepalive_timeout=75, shutdown_grace=60 (seconds); max_connections=512; "
                   "max_body_bytes=256MiB, max_decoded_bytes=128MiB, max_spool_bytes=256MiB "
                   "(bytes, or with KiB/MiB/GiB).")
@click.option("--otlp-endpoint", default=None, metavar="URL",
              help="Export every stored call as an OpenTelemetry span to this OTLP/HTTP collector "
                   "(e.g. http://127.0.0.1:4318; also otlp_endpoint in an [export] table of --config).")
def serve(host, port, db_path, upstreams, config_file, allow_remote, limits, otlp_endpoint):
    """Run the capture proxy daemon (with the built-in simulator at /u/sim)."""
    from .daemon import run, serve_forever

    try:
        cfg = build_config(config_file=config_file, host=host, port=port, db=db_path,
                           upstream_options=upstreams, allow_remote=allow_remote, limit_options=limits,
                           otlp_endpoint=otlp_endpoint)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not is_loopback(cfg.host) and not cfg.allow_remote:
        raise click.ClickException(
            f"refusing to bind {cfg.host}: captures contain your prompts. Pass --allow-remote if you mean it."
        )

    def announce(daemon):
        click.echo(f"ctxscope {__version__} listening on {daemon.url}  (captures: {cfg.db})")
        click.echo(f"  Web UI:     {daemon.url}/")
        click.echo(f"  Anthropic:  ANTHROPIC_BASE_URL={daemon.url}/anthropic")
        click.echo(f"  OpenAI:     OPENAI_BASE_URL={daemon.url}/openai/v1")
        click.echo(f"  Gemini:     GOOGLE_GEMINI_BASE_URL={daemon.url}/gemini")
        if daemon.sim is not None:
            where = f"in {daemon.sim.token_file}" if daemon.sim.token_file else "not written: set CTXSCOPE_SIM_TOKEN"
            click.echo(f"  Simulator:  {daemon.url}/u/sim/v1   (no API key needed; control token, header "
                       f"X-Sim-Token, {where})")
        if cfg.export is not None:
            click.echo(f"  Export:     stored calls as OTLP spans to {cfg.export.endpoint}")
        for name, url in sorted(cfg.upstreams.items()):
            if name not in ("anthropic", "openai", "gemini"):
                click.echo(f"  {name}: {daemon.url}/u/{name}/ -> {url}")
        click.echo("Press Ctrl-C to stop.")

    def stopping(waiting: int, store_down: bool) -> None:
        calls = f"{waiting} captured call{'s' * (waiting != 1)}"
        if store_down:  # nothing can be stored now: say where the calls wait instead of promising it
            click.echo(f"stopping: finishing open calls; the store is failing, so {calls} stay in the spool "
                       "for the next `ctxscope serve` on this database")
        elif waiting:
            click.echo(f"stopping: finishing open calls and storing {calls}...")
        else:
            click.echo("stopping: finishing open calls...")

    try:
        run(serve_forever(cfg, announce=announce, stopping=stopping))
    except OSError as exc:
        from .demo import port_hint

        raise click.ClickException(f"cannot listen on {cfg.host}:{cfg.port}: {exc}{port_hint(exc)}") from exc


@cli.command(context_settings=CONTEXT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=8790, show_default=True, help="Port to listen on.")
@click.option("--script", "script_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON list of scripted replies, one per model request (the format is below).")
def sim(host, port, script_file):
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

    from .settings import home_dir

    if not is_loopback(host):
        raise click.ClickException("the simulator binds loopback addresses only")
    try:
        script = load_script_file(script_file) if script_file else None
    except (ScriptError, ValueError, OSError) as exc:
        raise click.ClickException(f"bad script {script_file}: {exc}") from exc
    token, token_path = token_from_env(), home_dir() / TOKEN_FILE
    write_token_file(token_path, token)

    async def main():
        runner, url = await start_simulator(host, port, script=script, control_token=token)
        click.echo(f"ctxscope simulator on {url}  (Anthropic: {url}, OpenAI: {url}/v1). Ctrl-C to stop.")
        click.echo(f"  control endpoints {url}/_sim/...: header X-Sim-Token, the token is in {token_path}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


# declared in their modules
for command in (calls, show, sessions, db, diff, session, stats, reindex, demo, search, curl, export_session,
                import_file, replay, run_command, ca):
    cli.add_command(command)



class LazyAgentGroup(click.Group):
    """`ctxscope agent`: its commands (and the agent runtime they import) load only when one runs or
    its help is asked for, so `ctxscope --help` and the quick commands start fast
    (docs/architecture.md, "Quick start-up")."""

    def _real(self) -> click.Group:
        from .agent_commands import agent_group

        return agent_group

    def list_commands(self, ctx: click.Context) -> list[str]:
        return self._real().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._real().get_command(ctx, cmd_name)


cli.add_command(LazyAgentGroup("agent", context_settings=CONTEXT,
                               help="Run the ctxscope coding agent (its calls go through the local proxy unless "
                                    "--direct)."))
cli.add_command(findings)
cli.add_command(advise)


def main() -> None:  # pragma: no cover - console entry
    cli(prog_name="ctxscope")


if __name__ == "__main__":  # pragma: no cover
    main()
