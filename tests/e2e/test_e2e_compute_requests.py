"""Requests that compute (findings, advice) under the installed `ctxscope serve`: each runs in a
child of its own, killed when its client leaves or the daemon stops; SIGTERM with one in flight
exits within the shutdown grace (web/compute.py)."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import httpx2

from support import sdk_clients
from support.serve_process import running_serve

GRACE = 5.0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _computations(pid: int) -> list[int]:
    """The daemon's compute children now running (children of its store reader, web/reader.py)."""
    found, parents = [], {pid, *_children(pid)}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) in parents and b"ctxscope.web.compute" in cmdline:
            found.append(int(entry.name))
    return found


def _a_long_session(base: str, calls: int = 120) -> str:
    client = sdk_clients.OpenAI(base_url=f"{base}/u/sim/v1", api_key="sk-test-compute", max_retries=0, timeout=60)
    words = ["parse", "module", "cache", "token", "review", "function", "error", "path", "test", "branch"]
    rng = random.Random(41)

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    messages = [{"role": "system", "content": "You review code. " + text(2000)}]
    for i in range(calls):
        messages.append({"role": "user", "content": f"step {i}: " + text(400)})
        reply = client.chat.completions.create(model="gpt-sim", messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sessions = httpx2.get(f"{base}/_ctxscope/api/sessions", timeout=30).json()["sessions"]
        if sessions and sessions[0].get("calls", 0) >= calls:
            return sessions[0]["session"]
        time.sleep(0.5)
    raise AssertionError(f"the session was not stored: {sessions}")


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_computation_is_killed_when_its_client_leaves_and_sigterm_exits_within_the_grace(tmp_path):
    with running_serve(tmp_path, "--limit", f"shutdown_grace={GRACE}") as (proc, base):
        session = _a_long_session(base)
        ok = httpx2.get(f"{base}/_ctxscope/api/findings", params={"s": session}, timeout=300)
        assert ok.status_code == 200 and ok.json()["calls"] == 120  # the answer a child computed

        # a client that gives up after 0.3 s: its computation does not outlive it
        try:
            httpx2.get(f"{base}/_ctxscope/api/advice", params={"s": session}, timeout=0.3)
        except httpx2.TimeoutException:
            pass
        else:
            raise AssertionError("the advice answered within 0.3 s: too small a session to test this")
        assert _wait(lambda: not _computations(proc.pid), 5), "the computation outlived its client"

        # SIGTERM with a computation in flight
        answers: list[int] = []

        def ask() -> None:
            try:
                answers.append(
                    httpx2.get(f"{base}/_ctxscope/api/advice", params={"s": session}, timeout=120).status_code
                )
            except httpx2.TransportError:
                answers.append(0)

        asking = threading.Thread(target=ask)
        asking.start()
        assert _wait(lambda: bool(_computations(proc.pid)), 10), "no computation started"
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(GRACE + 30)
        took = time.monotonic() - began
        asking.join(30)
        assert answers in ([503], [0]), answers  # told the daemon stopped, or cut off; never an answer
    assert took < GRACE + 5, f"the daemon took {took:.1f} s to exit (grace {GRACE} s)"
