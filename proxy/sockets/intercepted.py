"""Which hosts the forward proxy intercepts (docs/architecture.md, "The forward proxy"): shared by
the proxy, which routes them, and the local CA, whose name constraints permit only them. Kept free
of aiohttp and cryptography so `ctxscope ca` can import it cheaply."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

PROVIDER_HOSTS = {
    "anthropic": "api.anthropic.com",
    "openai": "api.openai.com",
    "gemini": "generativelanguage.googleapis.com",
}


def intercepted_hosts(upstreams: dict[str, str]) -> dict[str, str]:
    """Host -> the route prefix its traffic takes: the provider hosts of the built-in names, and the
    hosts of the other upstreams' https URLs."""
    hosts: dict[str, str] = {}
    for name, url in upstreams.items():
        prefix = f"/{name}" if name in PROVIDER_HOSTS else f"/u/{quote(name, safe='')}"
        if name in PROVIDER_HOSTS:
            hosts[PROVIDER_HOSTS[name]] = prefix
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError:  # a URL the forwarder refuses anyway
            continue
        if parts.scheme == "https" and hostname:
            hosts.setdefault(hostname.lower().rstrip("."), prefix)
    return hosts
