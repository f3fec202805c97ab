"""What the forwarder learns about one call while it forwards it, and the Exchange made of it.

Forwarding only fills in fields and keeps references to chunks it already holds; the Exchange,
with secrets redacted and the body chunks joined, is built once the call is over, so none of that
work delays a byte on its way to the client.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.forward.routing import Route
from ctxscope.proxy.forward.whole import answered_whole
from ctxscope.proxy.ids import new_call_id
from ctxscope.proxy.redaction.redact import redact_request
from ctxscope.vocab.kinds import Outcome

_TEXT = {outcome: outcome.value for outcome in Outcome}  # (an enum's .value is a descriptor call)


class Recorder:
    """One call in flight; ``finish`` sets its outcome once (docs/architecture.md, "An outcome is set once")."""

    __slots__ = (
        "annotations",
        "body",
        "chunks",
        "ended_at",
        "error",
        "first_byte_at",
        "headers",
        "label",
        "left",
        "method",
        "outcome",
        "query",
        "response_headers",
        "route",
        "started",
        "status",
        "synthetic_body",
        "task",
    )

    def __init__(
        self,
        route: Route,
        request: web.Request,
        headers: list[tuple[str, str]],
        annotations: list[tuple[str, str]],
        label: str | None,
        query: str,
        started: float,
    ):
        self.route = route
        self.method = request.method
        self.headers = headers
        self.annotations = annotations
        self.label = label
        self.query = query
        self.started = started
        self.body = b""
        self.status: int | None = None
        self.response_headers: tuple[tuple[str, str], ...] = ()
        self.chunks: list[bytes] = []
        self.first_byte_at: float | None = None
        self.ended_at: float | None = None
        self.outcome: Outcome = Outcome.OK
        self.error: str | None = None
        self.synthetic_body: bytes | None = None  # an answer the proxy made itself (upstream down...)
        self.task: asyncio.Task[None] | None = None  # the handler, cancelled when its client leaves
        self.left = False

    def client_left(self) -> None:
        """The client closed its connection: stop waiting for (and paying for) the upstream's answer."""
        if self.ended_at is None and self.task is not None:
            self.left = True
            if self.whole(len(self.chunks)):  # it left after the last event: nothing was cut
                self.finish(self.outcome, None)
            self.task.cancel()

    def whole(self, sent: int) -> bool:
        """True when the answer's first ``sent`` chunks, already handed to the client, are all of it."""
        return self.status is not None and answered_whole(self.response_headers, self.chunks[:sent])

    def cut(self, outcome: Outcome, error: str, sent: int | None = None) -> None:
        """Finish as ``outcome`` (a cut), unless the ``sent`` chunks (default: all) already made the
        answer whole: then as the answer's own outcome (docs/architecture.md, "Honest outcomes")."""
        if self.whole(len(self.chunks) if sent is None else sent):
            self.finish(self.outcome, None)
        else:
            self.finish(outcome, error)

    def finish(self, outcome: Outcome, error: str | None) -> float:
        """Set the outcome unless one is set already; the call's end time either way."""
        if self.ended_at is None:
            self.ended_at = time.time()
            self.outcome = outcome
            self.error = error
        return self.ended_at

    def to_exchange(self, salt: bytes) -> ex.Exchange:
        """Built after the response is done: secrets are removed here, off the forwarding path."""
        ended_at = self.finish(self.outcome, self.error)
        request = redact_request(self.headers, self.query, salt)
        extra = {"proxy_error_body": self.synthetic_body.decode()} if self.synthetic_body else {}
        route = self.route
        return ex.Exchange(  # positional, in the fields' order (tests/proxy/test_proxy_exchange.py checks it)
            new_call_id(),  # id
            route.provider,  # provider
            route.upstream.recorded,  # upstream
            self.method,  # method
            route.path,  # path
            request.query,  # query
            self.label,  # session_label
            tuple(self.annotations),  # annotations
            request.headers,  # request_headers
            request.key_fingerprint,  # key_fingerprint
            self.body,  # request_body
            self.status,  # status
            self.response_headers,  # response_headers
            b"".join(self.chunks),  # response_body
            self.started,  # started_at
            self.first_byte_at,  # first_byte_at
            ended_at,  # ended_at
            _TEXT[self.outcome],  # outcome
            self.error,  # error
            request.user_agent,  # client
            extra,  # extra
        )
