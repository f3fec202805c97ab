"""A real `ctxscope serve` answers the UI's store reads in a child of its own (web/reader.py): the
child listens on a socket only its owner can reach, goes once the reads stop and comes back with
the next one, and takes its daemon's address from the daemon, never from the browser's request."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import httpx2

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.writer.storing.thread import CaptureWriter

from support.factories import anthropic_request, make_exchange
from support.serve_process import running_serve


def _readers(pid: int) -> list[int]:
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [c for c in children if b"ctxscope.web.reader_child" in _cmdline(c)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _until(check, seconds: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_the_reader_child_is_owner_only_goes_when_idle_and_comes_back(tmp_path):
    with running_serve(tmp_path, "--limit", "idle_release=1") as (proc, base):
        assert not _readers(proc.pid)  # a daemon nobody reads from has none
        with httpx2.stream("GET", f"{base}/_ctxscope/api/events", timeout=60) as feed:  # holds the child
            assert feed.status_code == 200
            assert httpx2.get(f"{base}/_ctxscope/api/sessions", timeout=60).json() == {"sessions": []}
            first = _readers(proc.pid)
            assert len(first) == 1
            socket_path = _cmdline(first[0]).split(b"\0")[4].decode()
            folder = os.stat(Path(socket_path).parent)
            assert folder.st_uid == os.getuid() and stat.S_IMODE(folder.st_mode) == 0o700, oct(folder.st_mode)
        assert _until(lambda: not _readers(proc.pid), 20), "the reader child outlived its idle time"
        assert _until(lambda: not Path(socket_path).parent.exists(), 10)  # its folder goes once it is reaped
        assert httpx2.get(f"{base}/_ctxscope/api/sessions", timeout=60).status_code == 200
        again = _readers(proc.pid)
        assert len(again) == 1 and again != first


def test_a_browser_cannot_tell_the_reader_where_the_daemon_is(tmp_path):
    """The command `curl?via=daemon` builds sends a key to the daemon's address: a request that names
    another address in the daemon's own header to its child gets the daemon's real one."""
    writer = CaptureWriter(tmp_path / "c.db", analyzers=writer_analyzers(), status_file=False)
    writer.start()
    ex = make_exchange(request=anthropic_request([{"role": "user", "content": "hello"}]), session_label="s")
    writer.submit(ex)
    assert writer.stop()
    with running_serve(tmp_path) as (_proc, base):
        answer = httpx2.get(
            f"{base}/_ctxscope/api/curl",
            params={"id": ex.id, "via": "daemon"},
            headers={"X-Ctxscope-Own-Url": "http://evil.example:80"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        command = json.loads(answer.content)["command"]
        assert "evil.example" not in command and base in command, command


def test_a_deleted_session_leaves_no_body_in_the_reader_while_a_page_keeps_it_running(tmp_path):
    """A page's live feed keeps the reader child running; a body it cached is not served once its
    session is deleted."""
    writer = CaptureWriter(tmp_path / "c.db", analyzers=writer_analyzers(), status_file=False)
    writer.start()
    ex = make_exchange(request=anthropic_request([{"role": "user", "content": "secret plan"}]), session_label="gone")
    writer.submit(ex)
    assert writer.stop()
    with running_serve(tmp_path) as (proc, base), httpx2.Client(base_url=base, timeout=60) as client:
        page = client.get("/").text
        token = page.split('name="ctxscope-token" content="', 1)[1].split('"', 1)[0]
        with httpx2.stream("GET", f"{base}/_ctxscope/api/events", timeout=60) as feed:
            assert feed.status_code == 200
            raw = client.get("/_ctxscope/api/raw", params={"id": ex.id, "kind": "request"})
            assert raw.status_code == 200 and "secret plan" in raw.text
            reader = _readers(proc.pid)
            deleted = client.delete("/_ctxscope/api/session", params={"s": "gone"}, headers={"X-Ctxscope-Token": token})
            assert deleted.status_code == 200, deleted.text
            assert _readers(proc.pid) == reader  # the page's feed kept the same child
            again = client.get("/_ctxscope/api/raw", params={"id": ex.id, "kind": "request"})
            assert again.status_code == 404, again.text


def test_a_page_that_closed_its_live_feed_does_not_hold_the_reader_child(tmp_path):
    """The feed is quiet for 15 s between heartbeats: the daemon notices the page left before that,
    also once the feed has said all it had and is quiet (as an open page's is)."""
    with running_serve(tmp_path, "--limit", "idle_release=1") as (proc, base):
        with httpx2.stream("GET", f"{base}/_ctxscope/api/events", timeout=60) as feed:
            assert feed.status_code == 200 and _readers(proc.pid)
            heard = b""
            for chunk in feed.iter_raw():
                heard += chunk
                if b'"asleep":true' in heard:  # the last change an idle daemon's status makes
                    break
            time.sleep(1.5)  # the feed is quiet now: nothing is written until its heartbeat
        began = time.monotonic()
        assert _until(lambda: not _readers(proc.pid), 20), "the reader child outlived the page"
        assert time.monotonic() - began < 8, f"the child went {time.monotonic() - began:.1f} s after the page"
