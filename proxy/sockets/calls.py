"""The calls on one relayed WebSocket: each ``response.create`` the client sends, with the events
that answer it, becomes one Exchange (docs/architecture.md, "Responses over WebSocket").

Only the frame's ``type`` is looked at, by a regular expression over its text (the first ``"type"``
key, which OpenAI's events and the clients' ``response.create`` put first); no frame is parsed
as JSON here. The recorded request body is the ``response.create`` frame as sent, the response
body its answering frames as SSE ``data:`` lines, so the writer reassembles them like a streamed
HTTP response. With ``--ask-diagnosis`` a ``response.create`` may go upstream with the field
added (``forward/ask_diagnosis.py``); the recorded frame is still the client's, and an annotation
says what was added.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxscope.proxy import exchange as ex
from ctxscope.proxy.forward.ask_diagnosis import Asked, DiagnosisAsker, asked_annotation, who_of
from ctxscope.proxy.forward.routing import Route
from ctxscope.proxy.ids import new_call_id
from ctxscope.proxy.redaction.redact import extract_api_key, fingerprint, redact_headers, redact_query
from ctxscope.vocab.kinds import Outcome

WEBSOCKET_METHOD = "WEBSOCKET"  # the recorded method of a call made over a socket
_TYPE = re.compile(r'"type"\s*:\s*"([^"\\]{1,80})"')
CREATE = "response.create"
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})


def frame_type(text: str) -> str | None:
    found = _TYPE.search(text)
    return found.group(1) if found else None


@dataclass
class _Call:
    started: float
    request: bytes  # the client's frame, as it sent it
    frames: list[bytes] = field(default_factory=list)
    first_byte_at: float | None = None
    asked: Asked | None = None  # ``--ask-diagnosis``: what went upstream instead


class SocketCalls:
    """Turns the frames of one socket into recorded calls, in the order they were asked for."""

    def __init__(
        self,
        route: Route,
        headers: list[tuple[str, str]],
        annotations: list[tuple[str, str]],
        label: str | None,
        query: str,
        salt: bytes,
        submit: Callable[[ex.Exchange], None],
        asker: DiagnosisAsker | None = None,
    ):
        self.route, self.label, self.query, self.submit = route, label, query, submit
        self.asker = asker
        self.who = who_of(label, headers) if asker is not None else None
        self.annotations = tuple(annotations)
        self.headers = redact_headers(headers)
        self.key = fingerprint(extract_api_key(headers, query), salt)
        self.client = next((v for k, v in headers if k.lower() == "user-agent"), None)
        self.response_headers: tuple[tuple[str, str], ...] = ()
        self.socket_id = new_call_id()
        self.open: deque[_Call] = deque()
        self.recorded = 0

    def client_frame(self, text: str) -> str:
        """Note a ``response.create``; returns the frame to send upstream (the client's, unless a
        diagnosis is asked for on its behalf)."""
        if frame_type(text) != CREATE:
            return text
        asked = self.asker.prepare_frame(self.route.upstream.name, text, self.who) if self.asker else None
        self.open.append(_Call(time.time(), text.encode(), asked=asked))
        return asked.body.decode() if asked is not None and asked.added is not None else text

    def upstream_frame(self, text: str) -> str:
        self._answered(text)
        return text

    def _answered(self, text: str) -> None:
        if not self.open:
            return  # an event that answers no recorded request (a keep-alive, a late error)
        call = self.open[0]
        now = time.time()
        if call.first_byte_at is None:
            call.first_byte_at = now
        call.frames.append(text.encode())
        kind = frame_type(text)
        if kind in TERMINAL:
            self.open.popleft()
            failed = kind == "error"
            if call.asked is not None and self.asker is not None and not failed:
                self.asker.learn(call.asked, 200, call.frames, None)
            self._record(
                call,
                now,
                Outcome.HTTP_ERROR if failed else Outcome.OK,
                "the upstream answered with an error event" if failed else None,
            )

    def closed(self, outcome: Outcome, why: str) -> None:
        """The socket ended: calls still waiting for their answer are recorded as cut."""
        now = time.time()
        while self.open:
            self._record(self.open.popleft(), now, outcome, why)

    def refused(self, started: float, status: int | None, outcome: Outcome, error: str | None, body: bytes) -> None:
        """The upgrade itself, when the upstream did not accept it: recorded as the GET it was."""
        call = _Call(started, b"", [body], time.time() if status is not None else None)
        self._record(call, time.time(), outcome, error, method="GET", status=status)

    def _record(
        self,
        call: _Call,
        ended: float,
        outcome: Outcome,
        error: str | None,
        *,
        method: str = WEBSOCKET_METHOD,
        status: int | None = 101,
    ) -> None:
        if method == WEBSOCKET_METHOD:
            body = b"".join(b"data: " + frame + b"\n\n" for frame in call.frames)
        else:
            body = b"".join(call.frames)
        self.recorded += 1
        self.submit(
            ex.Exchange(
                id=new_call_id(),
                provider=self.route.provider,
                upstream=self.route.upstream.recorded,
                method=method,
                path=self.route.path,
                query=redact_query(self.query),
                session_label=self.label,
                annotations=self.annotations
                if call.asked is None or call.asked.added is None
                else (*self.annotations, asked_annotation(call.asked.added)),
                request_headers=self.headers,
                key_fingerprint=self.key,
                request_body=call.request,
                status=status,
                response_headers=self.response_headers,
                response_body=body,
                started_at=call.started,
                first_byte_at=call.first_byte_at,
                ended_at=ended,
                outcome=outcome.value,
                error=error,
                client=self.client,
                extra={"transport": "websocket", "socket": self.socket_id, "frames": len(call.frames)},
            )
        )
