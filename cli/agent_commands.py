"""``ctxscope agent run|chat``: the click group the composition root adds with ``cli.add_command(agent_group)``.

Both commands go through the conversation API with source ``cli``. Home is $CTXSCOPE_HOME
(default ~/.ctxscope); calls go through the running daemon (``--daemon``, else the one this
home's ``ctxscope serve`` recorded: ``cli/daemon_address.py``) unless ``--direct``. Ctrl-C during
a turn cancels that turn cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ctxscope.agent.core import activity as act
from ctxscope.agent.host.conversation import NotAvailable
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.host.session import AgentSession, SessionBusy
from ctxscope.agent.host.session_store import SessionNotFound
from ctxscope.agent.providers.catalog import (
    APIS,
    PROVIDERS,
    ProviderConfigError,
    ProviderSettings,
    make_client,
    resolve,
)
from ctxscope.agent_render import TerminalRenderer
from ctxscope.daemon_address import daemon_option, find_daemon

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def agent_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--provider",
            type=click.Choice(PROVIDERS),
            default="anthropic",
            show_default=True,
            envvar="CTXSCOPE_AGENT_PROVIDER",
            help="Model provider (sim: the built-in simulator).",
        ),
        click.option(
            "--api",
            type=click.Choice(APIS),
            default=None,
            help="Wire API (default: the provider's own; sim defaults to openai-chat).",
        ),
        click.option("--model", default=None, envvar="CTXSCOPE_AGENT_MODEL", help="Model name."),
        click.option("--base-url", default=None, help="Base URL of the API (overrides the proxy route)."),
        click.option("--direct", is_flag=True, help="Talk to --base-url or the provider itself, not the proxy."),
        daemon_option,
        click.option("--context-window", type=int, default=None, help="Context window in tokens."),
        click.option("--max-output-tokens", type=int, default=None, help="Output limit per model call."),
        click.option("--thinking-budget", type=int, default=None, help="Anthropic extended thinking budget (tokens)."),
        click.option(
            "--workspace",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Directory the tools work in (default: current directory).",
        ),
        click.option("--continue", "cont", is_flag=True, help="Continue the latest session (of this workspace)."),
        click.option("--session", "session_id", default=None, help="Resume the session with this id."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _settings(opts: dict[str, Any], proxy: str | None) -> ProviderSettings:
    try:
        return resolve(
            opts["provider"],
            api=opts["api"],
            model=opts["model"],
            base_url=opts["base_url"],
            direct=opts["direct"],
            proxy=proxy,
            context_window=opts["context_window"],
            max_output_tokens=opts["max_output_tokens"],
            thinking_budget=opts["thinking_budget"],
        )
    except ProviderConfigError as e:
        raise click.ClickException(str(e)) from e


def _runtime(opts: dict[str, Any]) -> AgentRuntime:
    settings = _settings(opts, None)  # a missing key or a bad name is said before the daemon is looked for
    if settings.via_proxy:  # the calls go through the daemon: find it
        proxy = find_daemon(opts["daemon"], also=", or talk to the provider itself with --direct")
        settings = _settings(opts, proxy)
    return AgentRuntime(make_client(settings), workspace=opts["workspace"], listener=TerminalRenderer())


def _session(rt: AgentRuntime, opts: dict[str, Any]) -> AgentSession:
    if opts["cont"] and opts["session_id"]:
        raise click.UsageError("use either --continue or --session, not both")
    try:
        if opts["session_id"]:
            from .options import resolve_agent_session

            return rt.open_session(resolve_agent_session(rt.home, opts["session_id"]))
    except SessionNotFound as e:
        raise click.ClickException(str(e)) from e
    if opts["cont"]:
        latest = rt.latest_session()
        if latest is None:
            raise click.ClickException("there is no session to continue")
        return latest
    return rt.create_session()


async def _turn(rt: AgentRuntime, session: AgentSession, text: str) -> act.TurnResult:
    """One turn with Ctrl-C bound to a clean cancel of that turn."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, session.abort)
        installed = True
    except (NotImplementedError, RuntimeError, ValueError):
        installed = False
    try:
        return await rt.conversation.ingress.run(session.id, text, source="cli")
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


def _banner(rt: AgentRuntime, session: AgentSession) -> None:
    c = rt.client
    route = getattr(c, "base_url", "")
    click.secho(f"session {session.id} · {c.provider}/{c.model} · {route}", err=True, dim=True)


def _exit_code(result: act.TurnResult) -> int:
    return 0 if result.ok else (130 if result.outcome == act.CANCELLED else 1)


@click.group("agent", context_settings=CONTEXT)
def agent_group() -> None:
    """Run the ctxscope coding agent (its calls go through the local proxy unless --direct)."""


@agent_group.command("run", context_settings=CONTEXT)
@click.argument("task")
@agent_options
def run_command(task: str, **opts: Any) -> None:
    """Run one task to completion and print the answer."""

    async def main() -> int:
        rt = _runtime(opts)
        try:
            session = _session(rt, opts)
            _banner(rt, session)
            result = await _turn(rt, session, task)
            click.secho(f"session {session.id} (resume with --session {session.id})", err=True, dim=True)
            return _exit_code(result)
        finally:
            await rt.aclose()

    sys.exit(asyncio.run(main()))


HELP = "/quit to leave · /compact [instructions] · /context · Ctrl-C cancels a running turn"


@agent_group.command("chat", context_settings=CONTEXT)
@agent_options
def chat_command(**opts: Any) -> None:
    """Interactive session: type a request, watch the agent work, /quit to leave."""
    with asyncio.Runner() as runner:
        rt = _runtime(opts)
        try:
            session = _session(rt, opts)
            _banner(rt, session)
            click.secho(HELP, err=True, dim=True)
            while True:
                try:
                    line = input("› ")
                except (EOFError, KeyboardInterrupt):
                    click.echo("")
                    break
                text = line.strip()
                if not text:
                    continue
                if text in ("/quit", "/exit"):
                    break
                if text.startswith("/"):
                    runner.run(_command(rt, session, text))
                    continue
                runner.run(_turn(rt, session, text))
        finally:
            runner.run(rt.aclose())
        click.secho(f"session {session.id} (resume with --session {session.id})", err=True, dim=True)


@agent_group.command("report", context_settings=CONTEXT)
@click.argument("session_id", metavar="SESSION")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Archive to write (default ./ctxscope-report-SESSION.tar.gz).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def report_command(session_id: str, output: Path | None, as_json: bool) -> None:
    """Bundle a session and its sub-sessions into a tar.gz with a collection manifest."""
    import json

    from ctxscope.agent.host.runtime import default_home
    from ctxscope.agent.host.session_report_bundle import bundle_session

    from .options import resolve_agent_session

    try:
        result = bundle_session(default_home(), resolve_agent_session(default_home(), session_id), output)
    except SessionNotFound as e:
        raise click.ClickException(str(e)) from e
    except OSError as e:
        raise click.ClickException(f"could not write the report: {e}") from e
    if as_json:
        click.echo(
            json.dumps(
                {
                    "archive": str(result.archive),
                    "sessions": list(result.sessions),
                    "files": result.files,
                    "unreadable": list(result.unreadable),
                }
            )
        )
        return
    click.echo(str(result.archive))
    click.secho(
        f"{len(result.sessions)} session(s), {result.files} file(s)"
        + (f", {len(result.unreadable)} unreadable (listed in the manifest)" if result.unreadable else ""),
        err=True,
        dim=True,
    )


@agent_group.command("context", context_settings=CONTEXT)
@click.argument("session_id", metavar="SESSION")
@click.option("--context-window", type=int, default=None, help="Context window in tokens (default: the model's).")
@click.option("--max-output-tokens", type=int, default=None, help="Output limit per call (default: the model's).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def context_command(session_id: str, context_window: int | None, max_output_tokens: int | None, as_json: bool) -> None:
    """How full a stored session's context is, and of what (what /context shows in chat)."""
    from ctxscope.agent.context.report import report_json
    from ctxscope.agent.host.context_views import stored_report
    from ctxscope.agent.host.runtime import default_home

    from .options import resolve_agent_session

    session_id = resolve_agent_session(default_home(), session_id)
    try:
        report = stored_report(
            default_home(), session_id, context_window=context_window, max_output_tokens=max_output_tokens
        )
    except SessionNotFound as e:
        raise click.ClickException(str(e)) from e
    click.echo(report_json(report) if as_json else report.render())


async def _command(rt: AgentRuntime, session: AgentSession, text: str) -> None:
    name, _, arg = text.partition(" ")
    if name == "/compact":
        from ctxscope.agent.context.compaction.engine import CompactionOutcome
        from ctxscope.agent.context.compaction.outcome import describe

        try:
            outcome = await rt.conversation.maintenance.compact(session.id, arg.strip() or None)
        except (NotAvailable, SessionBusy) as e:
            click.secho(f"/compact: {e}", err=True, fg="yellow")
        else:
            if isinstance(outcome, CompactionOutcome):
                click.secho(describe(outcome), err=True, fg=None if outcome.replaced else "yellow")
            else:
                click.secho(f"/compact: {outcome}", err=True)
    elif name == "/context":
        from ctxscope.agent.host.context_views import live_report

        click.echo(live_report(rt, session).render())
    elif name == "/help":
        click.secho(HELP, err=True)
    else:
        click.secho(f"unknown command {name} ({HELP})", err=True, fg="yellow")
