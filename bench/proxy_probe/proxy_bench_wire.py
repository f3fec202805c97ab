"""The proxy bench's wire: its payloads, the fast upstream and the minimal aiohttp passthrough.

Both servers run as child processes of the bench (``python bench/proxy_bench_wire.py --role
upstream|passthrough``) so each has a core's worth of event loop to itself, like the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import signal

import aiohttp
from aiohttp import web

CHAT_PATH = "/v1/chat/completions"
STREAM_CHUNKS = 200
UPLOAD_BYTES = 1 << 20
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-not-a-real-key"}

# ---- payloads: OpenAI chat shapes, so the capture writer does its real work on them ----------

SMALL_REQ = (
    b'{"model":"gpt-bench","max_tokens":16,"messages":[{"role":"system","content":"You are terse."},'
    b'{"role":"user","content":"Say hi, request %08d."}]}'
)
STREAM_REQ = SMALL_REQ[:-1] + b',"stream":true,"stream_options":{"include_usage":true}}'
_UPLOAD_HEAD = b'{"model":"gpt-bench","messages":[{"role":"user","content":"'
_UPLOAD_TAIL = b'"},{"role":"user","content":"request %08d"}]}'
_FILLER = b"The quick brown fox jumps over the lazy dog while the proxy copies bytes. "
_fill_len = UPLOAD_BYTES - len(_UPLOAD_HEAD) - len(_UPLOAD_TAIL % 0)
UPLOAD_REQ = _UPLOAD_HEAD + (_FILLER * (_fill_len // len(_FILLER) + 1))[:_fill_len] + _UPLOAD_TAIL
SMALL_RESP = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
    }
).encode()


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _stream_chunks() -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-bench"}
    out = [
        _sse({**base, "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]})
        for i in range(STREAM_CHUNKS - 3)
    ]
    out.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(
        _sse({**base, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 197, "total_tokens": 217}})
    )
    out.append(b"data: [DONE]\n\n")
    return out


STREAM_OUT = _stream_chunks()
STREAM_LEN = sum(map(len, STREAM_OUT))

# ---- child roles: the fast upstream and the minimal passthrough --------------------------------


async def _upstream_handler(request: web.Request) -> web.StreamResponse:
    await request.read()
    if request.headers.get("X-Bench-Kind") == "stream":
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for chunk in STREAM_OUT:  # one write per chunk, as fast as the socket takes them
            await resp.write(chunk)
        await resp.write_eof()
        return resp
    return web.Response(body=SMALL_RESP, content_type="application/json")


_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_REQ_DROP = _HOP | {"host", "content-length"}


def _passthrough_app(upstream: str) -> web.Application:
    """The least a correct streaming aiohttp proxy does: filter hop-by-hop headers, copy chunks."""
    app = web.Application(client_max_size=256 * 2**20)
    box: dict[str, aiohttp.ClientSession] = {}

    async def startup(_app):
        box["s"] = aiohttp.ClientSession(
            auto_decompress=False,
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
        )

    async def cleanup(_app):
        await box["s"].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _REQ_DROP]
        async with box["s"].request(
            request.method, upstream + request.raw_path, headers=headers, data=body or None, allow_redirects=False
        ) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _serve_role(role: str, upstream: str | None) -> None:
    if role == "upstream":
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_route("POST", "/{tail:.*}", _upstream_handler)
    else:
        app = _passthrough_app(upstream)
    runner = web.AppRunner(app, auto_decompress=False, access_log=None, handler_cancellation=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"LISTENING {site._server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def run_loop(coro, loop: str) -> None:
    if loop == "uvloop":
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


def have_uvloop() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def main() -> None:
    ap = argparse.ArgumentParser(description="a server role of bench/proxy_overhead.py")
    ap.add_argument("--role", choices=("upstream", "passthrough"), required=True)
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    ap.add_argument("--upstream-url")
    cfg = ap.parse_args()
    run_loop(_serve_role(cfg.role, cfg.upstream_url), cfg.loop)


if __name__ == "__main__":
    main()
