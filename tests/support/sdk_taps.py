"""httpx2 transports that record the raw response bytes an SDK client reads (before any decoding)."""

from __future__ import annotations

import httpx2


class _SyncTap(httpx2.SyncByteStream):
    def __init__(self, inner, buf):
        self.inner, self.buf = inner, buf

    def __iter__(self):
        for chunk in self.inner:
            self.buf.extend(chunk)
            yield chunk

    def close(self):
        self.inner.close()


class _AsyncTap(httpx2.AsyncByteStream):
    def __init__(self, inner, buf):
        self.inner, self.buf = inner, buf

    async def __aiter__(self):
        async for chunk in self.inner:
            self.buf.extend(chunk)
            yield chunk

    async def aclose(self):
        await self.inner.aclose()


class RecordingTransport(httpx2.BaseTransport):
    def __init__(self):
        self.inner = httpx2.HTTPTransport()
        self.bodies: list[bytearray] = []

    def handle_request(self, request):
        resp = self.inner.handle_request(request)
        buf = bytearray()
        self.bodies.append(buf)
        return httpx2.Response(
            resp.status_code, headers=resp.headers, stream=_SyncTap(resp.stream, buf), extensions=resp.extensions
        )

    def close(self):
        self.inner.close()


class AsyncRecordingTransport(httpx2.AsyncBaseTransport):
    def __init__(self):
        self.inner = httpx2.AsyncHTTPTransport()
        self.bodies: list[bytearray] = []

    async def handle_async_request(self, request):
        resp = await self.inner.handle_async_request(request)
        buf = bytearray()
        self.bodies.append(buf)
        return httpx2.Response(
            resp.status_code, headers=resp.headers, stream=_AsyncTap(resp.stream, buf), extensions=resp.extensions
        )

    async def aclose(self):
        await self.inner.aclose()
