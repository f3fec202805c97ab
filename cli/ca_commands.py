"""`ctxscope ca`: the local CA the forward proxy intercepts provider hosts with (docs/architecture.md,
"The forward proxy")."""

from __future__ import annotations

import click

from .daemon_address import daemon_option
from .forward_proxy_env import local_ca, proxy_environment
from .options import CONTEXT
from .settings import build_config


@click.group(context_settings=CONTEXT)
def ca() -> None:
    """The local certificate authority of the forward proxy (created on first use)."""


@ca.command(context_settings=CONTEXT)
def path() -> None:
    """Print the CA certificate's path."""
    click.echo(str(local_ca().cert_path))


@ca.command(context_settings=CONTEXT)
@daemon_option
def env(daemon: str | None) -> None:
    """Print the environment that sends HTTPS through the daemon and trusts its CA (eval it in a shell).

    The daemon need not run yet: with none recorded, the default address is printed."""
    import shlex

    from .daemon_address import daemon_address

    url = daemon_address(daemon).url
    if not url.startswith("http://"):
        raise click.ClickException(f"--daemon {url!r} is not an http:// URL of the daemon")
    try:  # the upstreams of the user's config: the CA is name-constrained to their hosts
        upstreams = build_config(
            config_file=None, host=None, port=None, db=None, upstream_options=(), allow_remote=False
        ).upstreams
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    for name, value in proxy_environment(url, upstreams).items():
        click.echo(f"export {name}={shlex.quote(value)}")
