"""`ctxscope replay`: re-send a captured call through the daemon and compare the answer with the original."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from ..daemon_address import daemon_option, find_daemon
from ..options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_call
from ..output import emit_json

WAIT_S = 30.0  # for the daemon's writer to store the replay (it stores when traffic pauses)


def send(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float) -> tuple[int, bytes]:
    """(status, body) of one HTTP request; an error status is an answer too."""
    request = urllib.request.Request(url, data=body, method=method)
    for name, value in headers:
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def _show(c: dict) -> None:
    def cell(v: object) -> str:
        return "-" if v is None else f"${v:.6f}" if isinstance(v, float) else str(v)

    rows = [("", "original", "replay")] + [
        (k, cell(c["original"][k]), cell(c["replay"][k]))
        for k in ("id", "model", "status", "cache_verdict", "input", "cache_read", "cache_write", "output", "cost_usd")
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


@click.command(context_settings=CONTEXT)
@click.argument("call")
@db_option
@click.option("--model", help="Send it to this model instead.")
@click.option("--upstream", metavar="NAME", help="Send it to this upstream of the daemon (/u/NAME) instead.")
@click.option(
    "--edit",
    "edits",
    multiple=True,
    metavar="POINTER=JSON",
    help="Set the value at this JSON Pointer of the request body first (repeatable), e.g. "
    '\'/system/0/cache_control={"type":"ephemeral"}\' to move a cache breakpoint.',
)
@click.option(
    "--api-key-env",
    metavar="NAME",
    help="The environment variable holding the key (default: the provider's, e.g. ANTHROPIC_API_KEY).",
)
@daemon_option
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds to wait for the answer.")
@json_option
def replay(
    call: str,
    db_path: Path | None,
    model: str | None,
    upstream: str | None,
    edits: tuple[str, ...],
    api_key_env: str | None,
    daemon: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Re-send CALL's request through the daemon (CALL is an id or a unique prefix).

    The answer is recorded as a new call, in a session of its own (replay:CALL) and linked to CALL
    (replay_of), and shown beside the original: cache read, cost. The key comes from the
    environment and is never stored.
    """
    from ctxscope.inspector.share.curl import key_env_for
    from ctxscope.inspector.share.replay import ReplayError, build_request, comparison, find_replay, parse_edit
    from ctxscope.inspector.store.queries import AmbiguousCallId, get_call

    from ..analysis_commands import make_analyzer

    db = open_db_or_fail(db_path)
    try:
        row = get_call(db, resolve_call(db, call))
        assert row is not None  # resolved above
        daemon_url = find_daemon(daemon)  # (after the id: a wrong id is the first thing to say)
        env = api_key_env or key_env_for(row)  # none for an imported call of no known API: it gets no key
        key = (os.environ.get(env) or None) if env else None
        req = build_request(
            db, row["id"], daemon_url, key=key, model=model, upstream=upstream, edits=[parse_edit(e) for e in edits]
        )
    except (ReplayError, AmbiguousCallId) as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        status, _ = send(req.method, req.url, req.headers, req.body, timeout)
    except OSError as exc:
        raise click.ClickException(
            f"cannot reach the daemon at {daemon_url}: "
            f"{getattr(exc, 'reason', None) or exc}; is `ctxscope serve` running?"
        ) from None
    deadline = time.monotonic() + WAIT_S
    found = find_replay(db, row["id"], req.nonce)
    while found is None and time.monotonic() < deadline:
        time.sleep(0.1)
        found = find_replay(db, row["id"], req.nonce)
    if found is None:
        raise click.ClickException(
            f"the daemon answered {status}, but the replay was not stored within {WAIT_S:.0f} s "
            f"in {db_path or 'the default database'}: is the daemon writing to it?"
        )
    result = comparison(db, row["id"], found, make_analyzer().prices)
    if as_json:
        emit_json(result)
        return
    click.echo(f"replayed {row['id']} as {found} in session {req.session} (HTTP {status})")
    _show(result)
