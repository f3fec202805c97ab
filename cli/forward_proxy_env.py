"""What points a client without a base-URL setting at the daemon's forward proxy: the local CA
(made on first use) and the environment that trusts it; `ca env` prints it and `run` sets it
(docs/architecture.md, "The forward proxy")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .settings import ensure_home

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
