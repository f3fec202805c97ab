"""Once a real `ctxscope serve` says every call of a burst is stored, the daemon and its writer child
have already given the burst's free heap back: their RSS then is what it stays at, not what it drops
to a moment later (docs/architecture.md, "Memory")."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx2
from aiohttp import web

from support.environment import require
from support.proxy_rig import serve_app
from support.serve_process import running_serve, writer_child

CALLS = 24
SLACK_MB = 4  # what a process may still give back after it said all is stored (page cache, a late free)
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 250000, "completion_tokens": 1},
    }
).encode()


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def _body(i: int) -> bytes:
    """A 1 MB chat request unlike the others (each one's own bytes are all new)."""
    words = " ".join(f"w{i}x{j}" for j in range(120_000))
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": words}]}).encode()


def test_the_heap_is_given_back_before_the_daemon_says_a_burst_is_stored(tmp_path, loop_thread):
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    require((libc or "").startswith("glibc"), "glibc's malloc_trim (elsewhere the heap is not given back)")

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/v1/chat/completions", answer)
    runner, upstream = loop_thread.call(serve_app(app))
    try:
        with running_serve(tmp_path, "--upstream", f"fast={upstream}") as (proc, base):
            with httpx2.Client(timeout=60) as client:
                for i in range(CALLS):
                    sent = client.post(
                        f"{base}/u/fast/v1/chat/completions",
                        content=_body(i),
                        headers={"Content-Type": "application/json"},
                    )
                    assert sent.status_code == 200, sent.text
                deadline = time.monotonic() + 120
                while True:  # as a user (or the bench) sees it: the moment the daemon says all is stored
                    writer = client.get(f"{base}/_ctxscope/api/status?store=0").json()["writer"]
                    if writer["written"] == CALLS and writer["queued"] == 0:
                        break
                    assert time.monotonic() < deadline, writer
                    time.sleep(0.02)
            child = writer_child(proc.pid)
            assert child is not None, f"serve {proc.pid} has no writer child"
            at_stored = {"daemon": _rss_mb(proc.pid), "writer child": _rss_mb(child)}
            time.sleep(2.0)  # the writer child's and the status publisher's next ticks have passed
            later = {"daemon": _rss_mb(proc.pid), "writer child": _rss_mb(child)}
            for who in at_stored:
                assert at_stored[who] - later[who] <= SLACK_MB, (who, at_stored, later)
    finally:
        loop_thread.call(runner.cleanup())
