"""Raw HTTP/1.1 over asyncio streams: what an attacker sends, byte for byte, with no client library
normalising paths, adding headers or hiding when the server closed the connection."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lowercased names
    body: bytes


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, limit=1 << 20), 10)


def head(
    method: str, path: str, port: int, headers: Iterable[tuple[str, str]] = (), *, host: str | None = None
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_response(reader: asyncio.StreamReader, timeout: float = 15.0) -> RawResponse | None:
    """One response (Content-Length, chunked, or up to the close); None if the connection closed first."""
    try:
        return await asyncio.wait_for(_read_response(reader), timeout)
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
        return None


async def _read_response(reader: asyncio.StreamReader) -> RawResponse:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:
        body = await reader.read()  # delimited by the close
    return RawResponse(status, headers, body)


async def wait_closed(reader: asyncio.StreamReader, timeout: float) -> float | None:
    """Seconds until the server closes the connection (EOF or reset), reading and dropping
    anything it sends meanwhile; None if it is still open after ``timeout``."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not await asyncio.wait_for(reader.read(65536), left):
                return time.monotonic() - t0
    except TimeoutError:
        return None
    except ConnectionError:
        return time.monotonic() - t0
    return None


async def send_until_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes, chunks: Iterable[bytes], timeout: float
) -> tuple[RawResponse | None, int, str]:
    """Send ``first`` then ``chunks`` while reading: a server that answers early (413) is heard even
    if it closes before the body is all sent. Returns the answer, the bytes sent and how sending ended."""
    reading = asyncio.create_task(read_response(reader, timeout))
    sent, how = 0, "sent all"
    try:
        writer.write(first)
        sent += len(first)
        for chunk in chunks:
            if reading.done():
                how = "answered before the body was all sent"
                break
            writer.write(chunk)
            sent += len(chunk)
            await asyncio.wait_for(writer.drain(), timeout)
    except (TimeoutError, ConnectionError) as exc:
        how = f"sending stopped: {type(exc).__name__}"
    answer = await reading
    return answer, sent, how


def close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        writer.close()
