"""`ctxscope ca`: the local CA the forward proxy intercepts provider hosts with (docs/architecture.md,
"The forward proxy")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .daemon_address import daemon_option
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
