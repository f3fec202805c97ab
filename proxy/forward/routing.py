"""Map an incoming path to a configured upstream. Never an open proxy: only the named upstreams are reached.

    /anthropic/<rest>            -> upstream "anthropic" + /<rest>
    /openai/<rest>               -> upstream "openai" + /<rest>
    /gemini/<rest>               -> upstream "gemini" + /<rest>
    /u/<name>/<rest>             -> upstream <name> + /<rest>
    /s/<label>/<any of the above> the same, with a session label

The path below the prefix goes upstream as the client encoded it, but never with a ``.`` or
``..`` segment (also percent-encoded, behind a backslash or a ``;``): an upstream or a server in
front of it would resolve them and leave the configured base path. Such a path is refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import unquote

DEFAULT_UPSTREAMS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
# Which error JSON shape a route's clients expect when the proxy itself must answer.
ANTHROPIC_SHAPE = "anthropic"
OPENAI_SHAPE = "openai"


@dataclass(frozen=True)
class Upstream:
    name: str
    base_url: str  # scheme://host[:port][/prefix], no trailing slash
    on_demand: bool = False  # started by the daemon (the built-in simulator): its URL lives as long as its child

    @property
    def recorded(self) -> str:
        """What a call stores as its upstream: the base URL, or for an upstream the daemon starts
        on demand its route name (``sim``), since its child's ephemeral port is gone once the child
        exits and was never an address to send to (docs/architecture.md, "The simulator's own address")."""
        return self.name if self.on_demand else self.base_url


@dataclass(frozen=True)
class Route:
    provider: str  # "anthropic", "openai", "gemini" or "u/<name>"
    upstream: Upstream
    path: str  # path below the prefix, starting with "/"
    session_label: str | None
    control: bool = False  # the path is a simulator control endpoint (/_sim...): local Host only

    @property
    def target_url(self) -> str:
        return self.upstream.base_url + self.path

    @property
    def error_shape(self) -> str:
        if self.provider == "anthropic" or "/messages" in self.path:
            return ANTHROPIC_SHAPE
        return OPENAI_SHAPE


class RouteError(LookupError):
    """The path names no configured upstream."""


class UnsafePath(ValueError):
    """The path below the prefix could leave the upstream's base path; ``route`` is where it was going."""

    def __init__(self, route: Route, message: str):
        super().__init__(message)
        self.route = route


_SEPARATORS = re.compile(r"[/\\]+")
CONTROL_PREFIX = "/_sim"


def _decoded(path: str) -> str:
    """Percent-decoded until stable (a few rounds: %252e%252e is %2e%2e to a server that decodes twice)."""
    for _ in range(3):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return path


def check_path(path: str) -> bool:
    """Whether ``path`` (raw, below the prefix) names a simulator control endpoint; raises
    ValueError when a segment is ``.`` or ``..`` in any spelling."""
    decoded = _decoded(path)
    for piece in _SEPARATORS.split(decoded):
        if piece.split(";", 1)[0] in (".", ".."):
            raise ValueError(f"path {path!r} has a '.' or '..' segment, which could leave the upstream's base path")
    return _SEPARATORS.sub("/", decoded).lower().startswith(CONTROL_PREFIX)


def normalise_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not (url.startswith(("http://", "https://"))):
        raise ValueError(f"upstream URL must start with http:// or https://, got {url!r}")
    return url


def parse_upstream_option(text: str) -> tuple[str, str]:
    """Parse NAME=URL as given to --upstream."""
    name, sep, url = text.partition("=")
    name = name.strip()
    if not sep or not name or "/" in name:
        raise ValueError(f"expected NAME=URL, got {text!r}")
    return name, normalise_base_url(url)


def named_upstream(path: str) -> str | None:
    """The NAME of a ``/u/NAME/...`` path (a label's ``/s/LABEL/`` before it allowed), else None."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "s":
        parts = [""] + parts[3:]
    return unquote(parts[2]) if len(parts) > 2 and parts[1] == "u" and parts[2] else None


def resolve(path: str, upstreams: dict[str, str], on_demand: Collection[str] = ()) -> Route:
    """Resolve a raw request path (still percent-encoded) against the configured upstreams;
    ``on_demand``: the names of those the daemon started itself."""
    parts = path.split("/")  # ["", first, second, ...]
    label = None
    if len(parts) > 3 and parts[1] == "s":
        label = unquote(parts[2]) or None
        parts = [""] + parts[3:]
    if len(parts) < 2 or not parts[1]:
        raise RouteError("no provider prefix")
    head = parts[1]
    if head in DEFAULT_UPSTREAMS:
        provider, name, rest = head, head, parts[2:]
    elif head == "u" and len(parts) > 2 and parts[2]:
        name = unquote(parts[2])
        provider, rest = f"u/{name}", parts[3:]
    else:
        raise RouteError(f"unknown provider prefix /{head}/")
    base = upstreams.get(name)
    if base is None:
        raise RouteError(f"no upstream named {name!r} is configured")
    route = Route(provider, Upstream(name, base, name in on_demand), "/" + "/".join(rest), label)
    try:
        control = check_path(route.path)
    except ValueError as exc:
        raise UnsafePath(route, str(exc)) from None
    return Route(route.provider, route.upstream, route.path, label, control) if control else route
