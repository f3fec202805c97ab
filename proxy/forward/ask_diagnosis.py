"""Opt-in (``serve --ask-diagnosis``): ask the provider for its cache diagnosis on the client's
behalf (docs/architecture.md, "Cache verdicts").

For an Anthropic Messages or OpenAI Responses call whose conversation's latest answer id the
daemon saw, the bytes sent upstream gain ``diagnostics.previous_message_id`` (and the
``cache-diagnosis-2026-04-07`` beta) or ``prompt_cache_options.comparison_response_id``, spliced in
before the body's closing brace so every other byte stays the client's. The capture keeps the
client's bytes and headers; the ``x-ctxscope-asked-diagnosis`` annotation records what was added.

A conversation is the route, the session label (else the API key) and the first user message, so
a system or tools change stays in it while a sub-agent's starts its own. Answer ids are read from
the start of the answer (gzip and deflate decoded; another encoding is not read, and that
conversation is simply not asked for). On a Responses WebSocket each ``response.create`` frame is
asked for the same way (``prepare_frame``; the frame sent upstream gains the field, the recorded one
is the client's); a turn that names its ``previous_response_id`` belongs to that answer's
conversation. When off, none of this runs: the forwarder holds no asker.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from ctxscope.vocab.headers import Annotation

BETA = "cache-diagnosis-2026-04-07"
MAX_CONVERSATIONS = 4096
_HEAD = 64 * 1024  # how much of an answer is read for its id
_IDS = {
    "anthropic": re.compile(rb'"id"\s*:\s*"(msg_[A-Za-z0-9_-]{1,200})"'),
    "responses": re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,200})"'),
}


@dataclass(frozen=True)
class Asked:
    """One forwarded request's part in the protocol: its conversation, and what was added (None:
    nothing, the client asked itself or there was no earlier answer)."""

    api: str
    conversation: bytes
    body: bytes  # what goes upstream
    headers: list[tuple[str, str]]
    added: str | None  # the annotation's value


def _api(method: str, path: str) -> str | None:
    if method != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    return None


def _first_user(api: str, body: dict[str, object]) -> object:
    items = body.get("messages") if api == "anthropic" else body.get("input")
    if isinstance(items, str):
        return items
    if isinstance(items, list):
        return next((m for m in items if isinstance(m, dict) and m.get("role") == "user"), None)
    return None


def _splice(body: bytes, member: str) -> bytes | None:
    """The body with ``"name": value`` added as its object's last member; None when its end is not
    a plain closing brace."""
    end = body.rstrip()
    if not end.endswith(b"}"):
        return None
    inner = end[:-1].rstrip()
    sep = b"" if inner.endswith(b"{") else b","
    return inner + sep + member.encode() + b"}"


def _with_beta(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out, found = [], False
    for name, value in headers:
        if name.lower() == "anthropic-beta":
            found = True
            if BETA not in [v.strip() for v in value.split(",")]:
                value = f"{value},{BETA}" if value.strip() else BETA
        out.append((name, value))
    return out if found else [*out, ("anthropic-beta", BETA)]


def _without_length(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(n, v) for n, v in headers if n.lower() != "content-length"]


class DiagnosisAsker:
    """The latest answer id of each conversation seen, and the request bytes that name it."""

    def __init__(self, max_conversations: int = MAX_CONVERSATIONS) -> None:
        self._latest: OrderedDict[bytes, str] = OrderedDict()
        self._conversation_of: OrderedDict[str, bytes] = OrderedDict()  # answer id -> its conversation
        self._max = max_conversations

    def prepare(
        self,
        method: str,
        route_key: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        who: str | None,
    ) -> Asked | None:
        """What to send for this request; None when it is no call this asks for (another API, an
        encoded or unreadable body)."""
        api = _api(method, path)
        if api is None or not body:
            return None
        if any(n.lower() == "content-encoding" for n, _ in headers):
            return None  # a compressed body is sent as it came
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(parsed, dict):
            return None
        return self._ask(api, route_key, headers, body, parsed, who)

    def prepare_frame(self, route_key: str, text: str, who: str | None) -> Asked | None:
        """The same for one ``response.create`` frame on a Responses WebSocket: what to send
        upstream in its place; None when it is no readable frame."""
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(parsed, dict) or parsed.get("type") != "response.create":
            return None
        return self._ask("responses", route_key, [], text.encode(), parsed, who)

    def _conversation(self, api: str, route_key: str, parsed: dict[str, object], who: str | None) -> bytes:
        """The request's conversation: that of the answer it continues (``previous_response_id``,
        whose turn sends only new input), else the route, who and the first user message."""
        previous = parsed.get("previous_response_id")
        if api == "responses" and isinstance(previous, str) and previous in self._conversation_of:
            return self._conversation_of[previous]
        first = json.dumps(_first_user(api, parsed), sort_keys=True, default=str)
        return hashlib.blake2b("\x00".join((route_key, api, who or "", first)).encode(), digest_size=16).digest()

    def _ask(
        self,
        api: str,
        route_key: str,
        headers: list[tuple[str, str]],
        body: bytes,
        parsed: dict[str, object],
        who: str | None,
    ) -> Asked:
        conversation = self._conversation(api, route_key, parsed, who)
        previous = self._latest.get(conversation)
        if api == "anthropic":
            asks = isinstance(parsed.get("diagnostics"), dict)
            member = f'"diagnostics":{{"previous_message_id":{json.dumps(previous)}}}'
        else:
            options = parsed.get("prompt_cache_options")
            asks = isinstance(options, dict) and "comparison_response_id" in options
            member = f'"prompt_cache_options":{{"comparison_response_id":{json.dumps(previous)}}}'
            if isinstance(options, dict) and not asks:
                return Asked(api, conversation, body, headers, None)  # its own options: left alone
        if asks or previous is None or (api == "anthropic" and "diagnostics" in parsed):
            return Asked(api, conversation, body, headers, None)
        spliced = _splice(body, member)
        if spliced is None:
            return Asked(api, conversation, body, headers, None)
        sent = _without_length(headers)
        if api == "anthropic":
            sent = _with_beta(sent)
        added = (
            "diagnostics.previous_message_id=" if api == "anthropic" else "prompt_cache_options.comparison_response_id="
        )
        return Asked(api, conversation, spliced, sent, added + previous)

    def learn(self, asked: Asked, status: int | None, chunks: list[bytes], encoding: str | None) -> None:
        """Remember the answer's id as its conversation's latest."""
        if status != 200 or not chunks:
            return
        head, size = [], 0
        for chunk in chunks:
            head.append(chunk)
            size += len(chunk)
            if size >= _HEAD:
                break
        data = b"".join(head)
        if encoding:
            if encoding.strip().lower() not in ("gzip", "deflate", "x-gzip"):
                return
            try:
                data = zlib.decompressobj(wbits=47).decompress(data, _HEAD)
            except zlib.error:
                return
        found = _IDS[asked.api].search(data[:_HEAD])
        if found is None:
            return
        answer = found.group(1).decode()
        self._latest[asked.conversation] = answer
        self._latest.move_to_end(asked.conversation)
        self._conversation_of[answer] = asked.conversation
        for seen in (self._latest, self._conversation_of):
            while len(seen) > self._max:
                seen.popitem(last=False)


def who_of(label: str | None, headers: list[tuple[str, str]]) -> str | None:
    """Whose conversation a request is in: its session label, else its API key's header."""
    return label or next((v for k, v in headers if k.lower() in ("x-api-key", "authorization")), None)


def asked_annotation(value: str) -> tuple[str, str]:
    return (Annotation.ASKED_DIAGNOSIS.value, value)
