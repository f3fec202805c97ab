"""After big reads of a real store, and after a burst of calls, a real `ctxscope serve` (the installed
command, on uvloop) and its writer child go back to within 20% of their resting RSS: the daemon's
rest is its bare one, before any read (the reads run in a child stopped when idle), the writer
shrinks its caches once the burst is stored (docs/architecture.md, "Memory"). RSS is not timing:
the polls wait for memory to come back, not for a moment."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse
from pathlib import Path

import httpx2
from aiohttp import web

from ctxscope.inspector.pipeline.search_index import writer_analyzers

from support.environment import require
from support.factories import anthropic_request, make_exchange
from support.proxy_rig import serve_app
from support.serve_process import running_serve, writer_child

BACK = 1.2  # within 20% of rest
GREW = 1.3  # the reads must have grown the daemon at least this much, or the test proves nothing
WITHIN_S = 30.0
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1},
    }
).encode()


def _glibc() -> None:
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    require((libc or "").startswith("glibc"), "glibc's malloc_trim (elsewhere the heap is not given back)")


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def _tree_rss_mb(pid: int) -> float:
    """RSS of ``pid`` and its children, as the scale bench counts the daemon (bench/scale_measure.py)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _rss_mb(p)
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, IndexError):
            continue
    return total


def _back_within(pid: int, rest: float, seconds: float, rss=_rss_mb) -> list[float]:
    """RSS every 0.5 s until it is within BACK of ``rest`` or ``seconds`` passed; the figures seen."""
    seen, deadline = [], time.monotonic() + seconds
    while True:
        seen.append(round(rss(pid), 1))
        if seen[-1] <= BACK * rest or time.monotonic() > deadline:
            return seen
        time.sleep(0.5)


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _store(db: Path) -> dict[str, list[str]]:
    """A growing 120-call session (~400 KB prompts at the end) and one of 6 calls of ~2.5 MB prompts,
    stored by the writer's ingest as the daemon's child stores; each session's call ids in order."""
    from ctxscope.inspector.writer.storing.thread import CaptureWriter

    writer = CaptureWriter(db, analyzers=writer_analyzers(), status_file=False)
    writer.start()
    ids: dict[str, list[str]] = {"long": [], "big": []}
    messages: list = [{"role": "user", "content": "fix the failing test"}]
    for i in range(120):
        ex = make_exchange(request=anthropic_request(json.loads(json.dumps(messages))), session_label="long")
        writer.submit(ex)
        ids["long"].append(ex.id)
        messages += [
            {"role": "assistant", "content": f"reading f{i}.py"},
            {"role": "user", "content": _words(500, f"line{i}x")},
        ]
    big = [{"role": "user", "content": _words(300_000, "big")}]
    for i in range(6):
        ex = make_exchange(request=anthropic_request(json.loads(json.dumps(big))), session_label="big")
        writer.submit(ex)
        ids["big"].append(ex.id)
        big += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": _words(20_000, f"more{i}x")}]
    assert writer.stop()
    assert writer.stats().failed == 0
    return ids


def test_the_daemon_gives_back_what_big_reads_took(tmp_path):
    _glibc()
    ids = _store(tmp_path / "c.db")
    # idle_release=3: the reader child is stopped 3 s after the last read (20 s by default)
    with (
        running_serve(tmp_path, "--limit", "idle_release=3") as (proc, base),
        httpx2.Client(base_url=base, timeout=120) as client,
    ):
        time.sleep(3)  # as bench/scale.py takes it: the bare daemon, a few seconds after it answers
        rest = _tree_rss_mb(proc.pid)
        for session, calls in ids.items():
            q = urllib.parse.quote(session)
            for path in (
                "/_ctxscope/api/sessions?limit=100000",
                f"/_ctxscope/api/session?s={q}&limit=100000",
                f"/_ctxscope/api/sessions/{q}/transcript",
                f"/_ctxscope/api/call?id={calls[-1]}",
                f"/_ctxscope/api/call?id={calls[len(calls) // 2]}",
                f"/_ctxscope/api/raw?id={calls[-1]}",
                f"/_ctxscope/api/diff?id={calls[-1]}&base={calls[0]}",
                f"/_ctxscope/api/search?q={q}",
                "/_ctxscope/api/usage",
            ):
                answer = client.get(path)
                assert answer.status_code == 200, (path, answer.text[:200])
        after = _tree_rss_mb(proc.pid)
        assert after > GREW * rest, f"the reads did not grow the daemon ({rest:.0f} -> {after:.0f} MB): no test"
        seen = _back_within(proc.pid, rest, WITHIN_S, _tree_rss_mb)
        assert seen[-1] <= BACK * rest, f"daemon at rest {rest:.0f} MB, after the reads {after:.0f} MB, then {seen}"


def _writer_rss_mb(pid: int) -> float:
    """RSS of serve ``pid``'s writer child; 0 once it is gone (a retired child holds nothing)."""
    child = writer_child(pid)
    try:
        return _rss_mb(child) if child is not None else 0.0
    except OSError:
        return 0.0


def test_the_writer_child_and_the_daemon_give_back_what_a_burst_took(tmp_path, loop_thread):
    """Four clients send a burst: conversations of a few hundred KB (what fills the writer's
    caches of recent bodies), small calls, and one 4 MB prompt each (what both sides of the pipe
    keep for "New bytes only"). 30 s after all is stored the writer child is within 20% of its
    rest, taken after one call with the token engine built, as bench/memory_return.py takes it
    (a trim alone left it at ~1.3x until the idle release at 60 s), and so is the daemon."""
    _glibc()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/v1/chat/completions", answer)
    runner, upstream = loop_thread.call(serve_app(app))
    try:
        with running_serve(tmp_path, "--upstream", f"fast={upstream}") as (proc, base):

            def send(client: httpx2.Client, i: int, words: int) -> None:
                body = {"model": "gpt-4o", "messages": [{"role": "user", "content": _words(words, f"c{i}x")}]}
                sent = client.post(f"{base}/u/fast/v1/chat/completions", json=body)
                assert sent.status_code == 200, sent.text

            def stored(calls: int) -> None:
                deadline = time.monotonic() + 180
                while True:
                    writer = httpx2.get(f"{base}/_ctxscope/api/status?store=0", timeout=30).json()["writer"]
                    if writer["written"] >= calls and writer["queued"] == 0:
                        return
                    assert time.monotonic() < deadline, writer
                    time.sleep(0.1)

            with httpx2.Client(timeout=60) as client:
                send(client, 0, 10)
            stored(1)
            time.sleep(2)
            child = writer_child(proc.pid)
            assert child is not None
            rest, daemon_rest = _rss_mb(child), _rss_mb(proc.pid)

            def sender(k: int) -> None:
                with httpx2.Client(timeout=60) as client:
                    for i in range(1 + k, 121, 4):
                        send(client, i, 40_000 if i % 3 == 0 else 20)
                    send(client, 1000 + k, 450_000)

            threads = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            stored(125)
            assert writer_child(proc.pid) == child, "the writer child restarted: its rest is not comparable"
            after = _rss_mb(child)
            assert after > BACK * rest, f"the burst did not grow the writer child ({rest:.0f} -> {after:.0f} MB)"
            seen = _back_within(proc.pid, rest, WITHIN_S, _writer_rss_mb)
            assert seen[-1] <= BACK * rest, (
                f"writer child at rest {rest:.0f} MB, after the burst {after:.0f}, then {seen}"
            )
            daemon = _back_within(proc.pid, daemon_rest, 1.0)
            assert daemon[-1] <= BACK * daemon_rest, f"daemon at rest {daemon_rest:.0f} MB, then {daemon}"
    finally:
        loop_thread.call(runner.cleanup())
