"""`ctxscope ca`: the local CA the forward proxy intercepts provider hosts with (docs/architecture.md,
"The forward proxy")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .options import CONTEXT
from .settings import build_config, ensure_home

if TYPE_CHECKING:
    from ctxscope.proxy.sockets.ca import LocalCA


def local_ca(upstreams: dict[str, str] | None = None) -> LocalCA:
    """The CA in $CTXSCOPE_HOME/ca/, made now if there is none or if it may not vouch for the hosts of
    ``upstreams`` (default: the built-in ones); its bundle rebuilt if stale (cryptography is
    imported only here)."""
    from ctxscope.proxy.forward.routing import DEFAULT_UPSTREAMS
    from ctxscope.proxy.sockets.ca import LocalCA
    from ctxscope.proxy.sockets.intercepted import intercepted_hosts

    try:
        home = ensure_home()
    except OSError as exc:
        raise click.ClickException(f"cannot create ctxscope's home: {exc}") from None
    return LocalCA(home / "ca", tuple(intercepted_hosts(upstreams or DEFAULT_UPSTREAMS)))


def proxy_environment(url: str, upstreams: dict[str, str] | None = None) -> dict[str, str]:
    """What makes clients without a base-URL setting use the daemon as their HTTPS proxy and trust
    its CA: the bundle (system roots plus ours) where a variable replaces the roots, our CA alone
    where it adds to them; the daemon itself is reached directly."""
    ca = local_ca(upstreams)
    return {
        "HTTPS_PROXY": url,
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "SSL_CERT_FILE": str(ca.bundle_path),
        "REQUESTS_CA_BUNDLE": str(ca.bundle_path),
        "NODE_EXTRA_CA_CERTS": str(ca.cert_path),
        "CODEX_CA_CERTIFICATE": str(ca.bundle_path),
    }


@click.group(context_settings=CONTEXT)
def ca():
    """The local certificate authority of the forward proxy (created on first use)."""


@ca.command(context_settings=CONTEXT)
def path():
    """Print the CA certificate's path."""
    click.echo(str(local_ca().cert_path))


@ca.command(context_settings=CONTEXT)
@click.option("--port", type=int, default=None, help="The daemon's port (default 8787).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The daemon's config file (for its port).")
def env(port, config_file):
    """Print the environment that sends HTTPS through the daemon and trusts its CA (eval it in a shell)."""
    try:
        cfg = build_config(config_file=config_file, host=None, port=port, db=None, upstream_options=(),
                           allow_remote=False)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "") else cfg.host
    for name, value in proxy_environment(f"http://{host}:{cfg.port}", cfg.upstreams).items():
        click.echo(f"export {name}={value}")
