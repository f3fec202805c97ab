"""A captured request as a runnable curl command: the exact body, the key as an environment variable.

The stored headers had their secrets redacted; the command puts ``$ANTHROPIC_API_KEY`` (or the
variable the provider's SDK reads) where the key went, so running it needs the key in the
environment and the command itself never holds one (docs/architecture.md, "Exports never carry a
key"). The body goes byte for byte through ``head -c`` from a heredoc, or from a file when it is
large, not text, or holds the heredoc's end line. An imported call's command targets the daemon's
route for its API, never the host its file named, and one of no known API gets no key at all
(docs/architecture.md, "Imported calls choose no host"). A call to the built-in simulator targets
the daemon's ``/u/sim`` route too, and needs no key: its upstream was a child's ephemeral port
(docs/architecture.md, "The simulator's own address").
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass
from urllib.parse import quote

from ctxscope.inspector.share.imported import ROUTES, UNKNOWN, is_imported
from ctxscope.proxy.redaction.redact import REDACTED
from ctxscope.vocab.apis import SIMULATOR_PROVIDER

HEREDOC_MAX = 64 * 1024  # bigger bodies go to a file
_QUERY_REDACTED = "%5Bredacted%5D"
# Headers curl sets itself, or that describe a connection rather than the request.
_LEFT_OUT = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
        "proxy-connection",
        "expect",
    }
)
_KEY_HEADERS = {"x-api-key": "{}", "authorization": "Bearer {}", "x-goog-api-key": "{}", "api-key": "{}"}


class NoRoute(ValueError):
    """The call has no daemon route a key may be sent through (an imported call of no known API)."""


@dataclass(frozen=True)
class CurlCommand:
    text: str  # the shell command (a comment line first when something was left out)
    body_file: str | None  # the file the command reads the body from, when it needs one
    key_env: str | None  # the environment variable holding the key (None: the call gets no key)


def is_simulated(call: dict) -> bool:
    """Whether a stored call went to the simulator (``u/sim``), which only the daemon reaches."""
    return str(call.get("provider") or "") == SIMULATOR_PROVIDER and not is_imported(call)


def needs_daemon(call: dict) -> bool:
    """Whether the call's command must go through the daemon's route, not its stored upstream: an
    imported call (its file chose the upstream), a simulator call, or any call whose stored
    upstream is a route name rather than a URL (an upstream the daemon starts itself)."""
    upstream = str(call.get("upstream") or "")
    return is_imported(call) or is_simulated(call) or not upstream.startswith(("http://", "https://"))


def key_env_for(call: dict) -> str | None:
    """The variable the provider's own SDK reads its key from, by the call's route and API (never a
    host name); None for an imported call of no known API, which gets no key, and for a simulator
    call, which needs none."""
    provider, api = str(call.get("provider") or ""), str(call.get("api") or "")
    if provider == UNKNOWN or is_simulated(call):
        return None
    if provider == "anthropic" or api.startswith("anthropic."):
        return "ANTHROPIC_API_KEY"
    if provider == "gemini" or api.startswith("gemini."):
        return "GEMINI_API_KEY"
    return "OPENAI_API_KEY"


def daemon_route(call: dict, daemon_url: str) -> str:
    """The base URL of the daemon's route for ``call`` (with its session label), e.g.
    ``http://127.0.0.1:8787/s/LABEL/anthropic``. An imported call may only use the provider
    routes; NoRoute when the call has none."""
    provider = str(call.get("provider") or "")
    if provider in ROUTES:
        route = provider
    elif provider.startswith("u/") and len(provider) > 2 and not is_imported(call):  # a configured upstream
        route = "u/" + quote(provider[2:], safe="")
    else:
        raise NoRoute(
            f"call {call.get('id')} speaks no API ctxscope knows ({provider or 'no route'}): "
            "there is no daemon route to send it through with a key"
        )
    label = call.get("session_label")
    return daemon_url.rstrip("/") + (f"/s/{quote(str(label), safe='')}" if label else "") + "/" + route


def _url(call: dict, target: str | None, env: str | None) -> str:
    base = (target or call.get("upstream") or "").rstrip("/")
    query = call.get("query") or ""
    pieces = [shlex.quote(base + (call.get("path") or "") + ("?" if query else ""))]
    for i, part in enumerate(query.split(_QUERY_REDACTED) if query and env else [query] if query else []):
        if i:
            pieces.append(f'"${{{env}}}"')
        if part:
            pieces.append(shlex.quote(part))
    return "".join(pieces)


def _needs_file(body: bytes, end: str) -> bool:
    if len(body) > HEREDOC_MAX or b"\0" in body:
        return True
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return end in text.splitlines() or "\r" in text


def curl_command(
    call: dict,
    body: bytes,
    *,
    body_decoded: bool = False,
    target: str | None = None,
    key_env: str | None = None,
    body_file: str | None = None,
) -> CurlCommand:
    """The command for ``call`` (a row of ``queries.get_call``) sending ``body``.

    ``body_decoded``: the body is the decoded form of a compressed one, so Content-Encoding is left
    out. ``target``: a base URL to send to instead of the captured upstream (the daemon's route, to
    record the answer); an imported call needs one (NoRoute without: its file chose the upstream).
    ``body_file``: read the body from this file (the caller writes it) even when a heredoc would do."""
    if target is None and needs_daemon(call):
        why = "was imported" if is_imported(call) else f"went to {call.get('upstream') or 'no upstream'}"
        raise NoRoute(
            f"call {call.get('id')} {why}: its command goes through the daemon's route, "
            "never the upstream the store names"
        )
    env = key_env or key_env_for(call)
    left_out: list[str] = []
    lines = [f"curl -sS -X {shlex.quote(call.get('method') or 'POST')} {_url(call, target, env)}"]
    compressed = False
    for pair in call.get("request_headers") or []:
        name, value = str(pair[0]), str(pair[1])
        low = name.lower()
        if low in _LEFT_OUT or (body_decoded and low == "content-encoding"):
            continue
        if low == "accept-encoding":  # curl asks for the codings it can decode itself
            compressed = True
            continue
        if value == REDACTED:
            if low in _KEY_HEADERS and env:
                lines.append(f'-H "{name}: {_KEY_HEADERS[low].format("$" + env)}"')
            else:
                left_out.append(name)
            continue
        lines.append(f"-H {shlex.quote(f'{name}: {value}')}")
    if compressed:
        lines.append("--compressed")
    end = "CTXSCOPE_BODY_" + secrets.token_hex(4).upper()
    heredoc = None
    if body:
        if body_file is None and _needs_file(body, end):
            body_file = f"{call['id']}-request.bin"
        if body_file is not None:
            lines.append(f"--data-binary @{shlex.quote(body_file)}")
        else:
            lines.append("--data-binary @-")
            heredoc = f"head -c {len(body)} <<'{end}' |\n{body.decode('utf-8')}\n{end}"
    command = " \\\n  ".join(lines)
    text = f"{heredoc}\n{command}" if heredoc else command
    if left_out:
        text = f"# left out, redacted when captured: {', '.join(sorted(set(left_out)))}\n{text}"
    return CurlCommand(text + "\n", body_file, env)
