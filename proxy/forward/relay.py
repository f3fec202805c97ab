"""The upstream's answer, sent to the client as it arrives, and what became of it.

Each chunk goes to the client as soon as it is read (nothing is held back to be parsed) and is
kept by reference for the capture. A cut on either side is recorded as what it was (see "Honest
outcomes" in docs/architecture.md); when the upstream's answer breaks off, the client's connection
is aborted too, so it sees a truncated answer and never a clean end.
"""

from __future__ import annotations

import time

import aiohttp
from aiohttp import web

from ctxscope.proxy.forward.headers import split_response_headers
from ctxscope.proxy.forward.recorder import Recorder
from ctxscope.vocab.kinds import Outcome

_NO_BODY_STATUS = frozenset({204, 304})


async def relay_response(
    request: web.Request, upstream: aiohttp.ClientResponse, rec: Recorder, read_timeout: float
) -> web.StreamResponse:
    """Send ``upstream``'s answer to the client; ``rec`` gets its status, headers, chunks and outcome."""
    rec.status = status = upstream.status
    rec.response_headers, headers = split_response_headers(upstream.raw_headers)
    rec.outcome = Outcome.OK if status < 400 else Outcome.HTTP_ERROR
    content = upstream.content
    if _complete(request, upstream, content):
        return await _answer_whole(request, upstream, headers, rec)
    response = web.StreamResponse(status=status, reason=upstream.reason, headers=headers)
    try:
        await response.prepare(request)
    except (ConnectionError, RuntimeError) as exc:
        rec.finish(Outcome.CLIENT_DISCONNECTED, f"client went away before headers: {exc}")
        return response
    chunks = rec.chunks
    try:
        async for chunk in content.iter_any():
            if rec.first_byte_at is None:
                rec.first_byte_at = time.time()
            chunks.append(chunk)
            await response.write(chunk)
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:  # (writing to the client)
        rec.cut(Outcome.CLIENT_DISCONNECTED, f"client disconnected: {exc}", sent=len(chunks) - 1)
        return response
    except TimeoutError:
        rec.finish(Outcome.TIMEOUT, f"no data from upstream for {read_timeout:g}s")
        abort_client(request)
        return response
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
        rec.finish(Outcome.UPSTREAM_RESET, f"upstream connection lost mid-response: {exc}")
        abort_client(request)
        return response
    try:
        await response.write_eof()
    except (ConnectionError, RuntimeError) as exc:
        rec.cut(Outcome.CLIENT_DISCONNECTED, f"client disconnected at the end: {exc}")
        return response
    rec.finish(rec.outcome, None)
    return response


async def _answer_whole(
    request: web.Request, upstream: aiohttp.ClientResponse, headers: list[tuple[str, str]], rec: Recorder
) -> web.Response:
    """The whole body came with the headers: send both in one write (nothing is held back)."""
    body = upstream.content.read_nowait()
    if body:
        rec.first_byte_at = time.time()
        rec.chunks.append(body)
    response = web.Response(status=upstream.status, reason=upstream.reason, headers=headers, body=body)
    try:
        await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, RuntimeError) as exc:
        rec.finish(Outcome.CLIENT_DISCONNECTED, f"client went away before the answer: {exc}")
        return response
    rec.finish(rec.outcome, None)
    return response


def _complete(request: web.Request, upstream: aiohttp.ClientResponse, content: aiohttp.StreamReader) -> bool:
    """True when the upstream's whole Content-Length body is already here (typical of small JSON)."""
    return (
        content.is_eof()
        and content.exception() is None
        and upstream.content_length is not None
        and upstream.content_length == content.total_bytes
        and upstream.status not in _NO_BODY_STATUS
        and request.method != "HEAD"
    )


def abort_client(request: web.Request) -> None:
    """Give the client the same truncation the upstream gave us: close without a clean end."""
    transport = request.transport
    if transport is not None:
        transport.abort()
