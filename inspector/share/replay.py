"""Replay: a captured request re-sent through the daemon, recorded as a new call linked to it.

The request is rebuilt from the store: the exact body (or, with edits, the decoded JSON changed at
the given pointers), the headers as stored less the redacted ones, and the key from the
environment where the key was. Annotations put the replay in a session of its own
(``replay:<original id>``) and name the original (``x-ctxscope-replay-of``); a writer analyzer
(``pipeline/replay_links.py``) turns that into the ``replay_of`` column. The key is never stored: the proxy
redacts it like any other (docs/architecture.md, "Replay"). The request goes to the daemon's URL
the caller gives (its own socket's address in the UI, ``--daemon`` in the CLI), to the route of
the call's provider, never to a host the store names ("Imported calls choose no host").
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ctxscope.inspector.analyses.prices import PriceTable, Unpriced
from ctxscope.inspector.share.curl import NoRoute, daemon_route, is_simulated, key_env_for
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived.replays import replays_of
from ctxscope.inspector.store.sessions import REPLAY_PREFIX
from ctxscope.proxy.redaction.redact import REDACTED
from ctxscope.vocab.headers import ANNOTATION_PREFIX, Annotation

REPLAY_OF = Annotation.REPLAY_OF.value
REPLAY_ID = Annotation.REPLAY_ID.value  # a nonce: tells this replay's call from earlier ones
SESSION = Annotation.SESSION.value
_QUERY_REDACTED = "%5Bredacted%5D"
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
        "accept-encoding",
    }
)
_KEY_HEADERS = {"x-api-key": "{}", "authorization": "Bearer {}", "x-goog-api-key": "{}", "api-key": "{}"}


class ReplayError(ValueError):
    """The call cannot be replayed as asked: no body, a bad edit, no key in the environment."""


def _missing_key(row: dict, where: str, cli: bool) -> ReplayError:
    """The error for a key nobody gave; ``cli``: the sender is the CLI (whose --api-key-env may
    help), else the UI, whose key can only come from the daemon's environment."""
    env = key_env_for(row)
    if env is None:
        return ReplayError(
            f"the call was sent with a key ({where}), but it was imported and speaks no API "
            "ctxscope knows: no key is sent for it"
        )
    if not cli:
        return ReplayError(
            f"the call was sent with a key ({where}): the daemon replays with ${env} from its own "
            "environment, and it has none: start `ctxscope serve` with it set"
        )
    return ReplayError(
        f"the call was sent with a key ({where}): put it in ${env} or name the variable with --api-key-env"
    )


@dataclass(frozen=True)
class ReplayRequest:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    nonce: str
    session: str
    original: str  # the full id of the call replayed


def parse_edit(text: str) -> tuple[str, Any]:
    """``POINTER=JSON`` as (pointer, value); ReplayError when it is not one."""
    pointer, sep, value = text.partition("=")
    if not sep or not (pointer == "" or pointer.startswith("/")):
        raise ReplayError(f'an edit is POINTER=JSON, e.g. /model="claude-haiku-4-5": {text!r}')
    try:
        return pointer, json.loads(value)
    except ValueError as exc:
        raise ReplayError(f"the value of {pointer} is not JSON: {exc}") from exc


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def apply_edit(doc: Any, pointer: str, value: Any) -> Any:
    """``doc`` with the value at ``pointer`` set (RFC 6901; "-" appends to an array); ReplayError if
    the pointer's parent does not exist."""
    if pointer == "":
        return value
    *parents, last = _tokens(pointer)
    node = doc
    for token in parents:
        try:
            node = node[int(token)] if isinstance(node, list) else node[token]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ReplayError(f"{pointer}: no {token!r} in the request") from exc
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and last == "-":
        node.append(value)
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    else:
        raise ReplayError(f"{pointer}: cannot set {last!r} there")
    return doc


def build_request(
    db: Db,
    call_id: str,
    daemon_url: str,
    *,
    key: str | None,
    model: str | None = None,
    upstream: str | None = None,
    edits: list[tuple[str, Any]] | None = None,
    cli: bool = True,
) -> ReplayRequest:
    """The request that replays ``call_id`` through the daemon at ``daemon_url``; ``cli``: the CLI
    sends it (else the UI: its errors name no command-line option)."""
    row = queries.get_call(db, call_id)
    if row is None:
        raise ReplayError(f"no call matches {call_id!r}")
    raw = queries.get_request_raw(db, row["id"])
    if not raw:
        raise ReplayError(f"call {row['id']} has no request body stored")
    body, reencoded = raw, bool(model or edits)
    if reencoded:
        decoded = queries.get_request_body(db, row["id"])
        try:
            doc = json.loads(decoded or b"")
        except ValueError as exc:
            raise ReplayError(f"call {row['id']}'s request is not JSON, so it cannot be edited") from exc
        for pointer, value in edits or []:
            doc = apply_edit(doc, pointer, value)
        if model:
            doc = apply_edit(doc, "/model", model)
        body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    headers: list[tuple[str, str]] = []
    for pair in row.get("request_headers") or []:
        name, value = str(pair[0]), str(pair[1])
        low = name.lower()
        if low in _LEFT_OUT or low.startswith(ANNOTATION_PREFIX) or (reencoded and low == "content-encoding"):
            continue
        if value == REDACTED:
            if low not in _KEY_HEADERS:
                continue  # a cookie or token we cannot restore: sent without it
            if not key:
                if is_simulated(row):  # the simulator takes no key: sent without one
                    continue
                raise _missing_key(row, name, cli)
            value = _KEY_HEADERS[low].format(key)
        headers.append((name, value))
    query = row.get("query") or ""
    if _QUERY_REDACTED in query and (key or not is_simulated(row)):
        if not key:
            raise _missing_key(row, "in the query", cli)
        query = query.replace(_QUERY_REDACTED, quote(key, safe=""))
    if upstream is not None:  # the user's choice: one of the daemon's configured upstreams
        base = daemon_url.rstrip("/") + "/u/" + quote(upstream, safe="")
    else:
        try:  # (no label in the route: the replay has a session of its own, by its header)
            base = daemon_route({**row, "session_label": None}, daemon_url)
        except NoRoute as exc:
            raise ReplayError(str(exc)) from None
    path = str(row.get("path") or "/")
    url = base + (path if path.startswith("/") else "/" + path) + ("?" + query if query else "")
    if urlsplit(url).netloc != urlsplit(daemon_url).netloc:  # a stored path can never move the host
        raise ReplayError(f"call {row['id']}'s stored path would leave the daemon at {daemon_url}")
    nonce, session = secrets.token_hex(8), REPLAY_PREFIX + row["id"]  # a session with a purpose
    headers += [(SESSION, session), (REPLAY_OF, row["id"]), (REPLAY_ID, nonce)]
    return ReplayRequest(row.get("method") or "POST", url, headers, body, nonce, session, row["id"])


def find_replay(db: Db, original: str, nonce: str) -> str | None:
    """The id of the call a replay with ``nonce`` produced, once the writer has stored it."""
    for row in replays_of(db, original):
        pairs = [tuple(p) for p in row["annotations"] if isinstance(p, list) and len(p) == 2]
        if (REPLAY_ID, nonce) in pairs:
            return row["id"]
    return None


def _cost(row: dict, prices: PriceTable) -> tuple[float | None, str | None]:
    """The call's cost and, when it has none, why (``prices.PriceTable.cost``)."""
    got = prices.cost(row.get("model"), row.get("usage"), row.get("started_at"), provider=row.get("provider"))
    return (None, got.reason) if isinstance(got, Unpriced) else (round(got, 6), None)


def comparison(db: Db, original: str, replay: str, prices: PriceTable) -> dict:
    """The original and its replay side by side: what the cache read and what each cost."""
    out = {}
    for name, call_id in (("original", original), ("replay", replay)):
        row = queries.get_call(db, call_id) or {}
        usage = row.get("usage") or {}
        cost, unpriced = _cost(row, prices)
        out[name] = {
            "id": row.get("id"),
            "session": row.get("session"),
            "model": row.get("model"),
            "status": row.get("status"),
            "outcome": row.get("outcome"),
            "cache_verdict": row.get("cache_verdict"),
            "input": usage.get("input"),
            "cache_read": usage.get("cache_read"),
            "cache_write": usage.get("cache_write"),
            "output": usage.get("output"),
            "cost_usd": cost,
            "unpriced": unpriced,
            "lost_tokens": row.get("cache_lost_tokens"),  # the one loss figure (analyses/cache/loss.py)
            "lost_usd": row.get("cache_lost_usd"),
            "replay_of": row.get("replay_of"),
        }
    return out
