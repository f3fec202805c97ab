"""What the three provider clients share: one aiohttp session, streaming POST, SSE, retries, errors.

Each provider module supplies the wire body, its auth headers and a pure stream parser
(``feed(SSEEvent, emit)`` then ``finish() -> ModelResponse``), so parsers are unit-tested on text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from ctxscope.vocab.headers import Annotation

from ..core.messages import Message
from ..core.model import DeltaSink, ModelRequest, ModelResponse, PreparedCall, ProviderError, RetryNotice, dumps
from .retry import RetryPolicy, classify, parse_retry_after
from .sse import SSEDecoder, SSEEvent

MAX_ERROR_BODY = 64 * 1024


def _user_agent() -> str:
    """``ctxscope-agent/<version>``: the inspector names this client by it, not as "aiohttp 3.x"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"ctxscope-agent/{version('ctxscope')}"
    except PackageNotFoundError:  # (run from a checkout that is not installed)
        return "ctxscope-agent"


USER_AGENT = _user_agent()


class StreamParser(Protocol):
    def feed(self, event: SSEEvent, emit: DeltaSink) -> None: ...

    def finish(self) -> ModelResponse: ...


def load_json(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ProviderError(f"malformed stream data: {data[:200]!r}", kind="malformed_stream") from None


def error_from_json(status: int | None, payload: Any, *, retry_after: float | None = None) -> ProviderError:
    """An error in either family's JSON shape: ``{"error": {...}}`` or ``{"type": "error", "error": {...}}``."""
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        kind = err.get("code") or err.get("type")
        message = err.get("message") or ""
    elif isinstance(payload, dict):
        kind, message = payload.get("code") or payload.get("type"), payload.get("message") or ""
    else:
        kind, message = None, str(payload)[:500]
    return classify(status, str(kind) if kind else None, str(message), retry_after=retry_after)


def previous_response_id(messages: Sequence[Message], provider: str) -> str | None:
    """The id of this conversation's latest answer from ``provider``: what a request names to ask
    for the provider's cache diagnosis (docs/architecture.md, "Cache verdicts")."""
    for m in reversed(messages):
        if m.role == "assistant" and m.meta.get("provider") == provider and isinstance(m.meta.get("response_id"), str):
            return m.meta["response_id"]
    return None


class HttpModelClient:
    """Base class: subclasses set ``api``/``path`` and implement ``build_body``, ``auth_headers``, ``new_parser``."""

    api = ""
    path = ""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        provider: str | None = None,
        context_window: int = 128_000,
        max_output_tokens: int = 16_000,
        extra_headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        http: aiohttp.ClientSession | None = None,
        read_timeout: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.provider = provider or self.api
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.extra_headers = dict(extra_headers or {})
        self.retry = retry or RetryPolicy()
        self._http = http
        self._own_http = http is None
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout)

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r})"

    # --- subclass hooks -------------------------------------------------------------------------
    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def new_parser(self) -> StreamParser:
        raise NotImplementedError

    # --- ModelClient ----------------------------------------------------------------------------
    def prepare(self, request: ModelRequest) -> PreparedCall:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "user-agent": USER_AGENT,
            **self.extra_headers,
            **dict(request.headers),
        }
        return PreparedCall(
            request=request,
            provider=self.provider,
            api=self.api,
            model=self.model,
            url=self.base_url + self.path,
            body=dumps(self.build_body(request)),
            headers=headers,
        )

    async def send(self, call: PreparedCall, on_delta: DeltaSink | None = None) -> ModelResponse:
        emit = on_delta or (lambda _d: None)
        attempt = 1
        while True:
            try:
                return await self._attempt(call, emit, attempt)
            except ProviderError as e:
                if not e.retryable or attempt > self.retry.max_retries:
                    raise
                delay = self.retry.delay(attempt, e)
                attempt += 1
                emit(RetryNotice(attempt, delay, str(e)))
                await self.retry.sleep(delay)

    async def aclose(self) -> None:
        if self._http is not None and self._own_http:
            await self._http.close()
        self._http = None

    # --- internals ------------------------------------------------------------------------------
    async def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
            self._own_http = True
        return self._http

    async def _attempt(self, call: PreparedCall, emit: DeltaSink, attempt: int) -> ModelResponse:
        headers = {**call.headers, **self.auth_headers()}
        if attempt > 1:
            headers[Annotation.ATTEMPT.value] = str(attempt)
        http = await self._session()
        try:
            async with http.post(call.url, data=call.body, headers=headers, allow_redirects=False) as resp:
                if resp.status != 200:
                    raw = await resp.content.read(MAX_ERROR_BODY)
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                    try:
                        payload: Any = json.loads(raw)
                    except ValueError:
                        payload = raw.decode("utf-8", "replace")
                    raise error_from_json(resp.status, payload, retry_after=retry_after)
                if "text/event-stream" not in resp.headers.get("content-type", ""):
                    raise ProviderError(
                        f"expected an event stream, got {resp.headers.get('content-type')!r}",
                        status=resp.status,
                        kind="not_a_stream",
                    )
                parser, decoder = self.new_parser(), SSEDecoder()
                async for chunk in resp.content.iter_any():
                    for ev in decoder.feed(chunk):
                        parser.feed(ev, emit)
                for ev in decoder.close():
                    parser.feed(ev, emit)
                return parser.finish()
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise ProviderError(f"connection failed: {type(e).__name__}: {e}", kind="connection", retryable=True) from e
