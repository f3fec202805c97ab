"""Sustained concurrent load on a busy machine through the installed `ctxscope serve`: every call
forwarded is stored, none dropped (docs/architecture.md, "A bounded spool").

Four SDK clients send prompts of fresh random text (no shared prefix: each call's body is new
bytes to store) for SECONDS, beside two processes that keep both cores busy. A writer child that
only runs on an idle CPU gets nothing here; its storing thread must climb to ordinary priority,
and its spool hold what it has not stored yet."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

from support import sdk_clients
from support.serve_process import running_serve

SENDERS = 4
HOGS = 2
SECONDS = 20.0
PROMPT_BYTES = 16 * 1024  # of hex: 8 KiB of new random bytes in each call


def _send(base: str, stop: threading.Event, sent: list[int], errors: list[str]) -> None:
    client = sdk_clients.OpenAI(base_url=f"{base}/u/sim/v1", api_key="sk-test-sustained", max_retries=0, timeout=60)
    n = 0
    while not stop.is_set():
        try:
            client.chat.completions.create(
                model="gpt-sim", messages=[{"role": "user", "content": os.urandom(PROMPT_BYTES // 2).hex()}]
            )
            n += 1
        except Exception as exc:  # counted, and the test fails on it
            errors.append(repr(exc))
    sent.append(n)


def _send_one(base: str) -> None:
    client = sdk_clients.OpenAI(base_url=f"{base}/u/sim/v1", api_key="sk-test-sustained", max_retries=0, timeout=120)
    client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "warm up"}])


def _writer(base: str) -> dict:
    import httpx2

    return httpx2.get(f"{base}/_ctxscope/api/status", timeout=30).json()["writer"]


def test_four_senders_beside_two_cpu_hogs_lose_no_call(tmp_path):
    hogs: list[subprocess.Popen] = []
    with running_serve(tmp_path) as (_proc, base):
        _send_one(base)  # not timed: the simulator's child starts on the first call
        try:
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
            stop, sent, errors = threading.Event(), [], []
            senders = [threading.Thread(target=_send, args=(base, stop, sent, errors)) for _ in range(SENDERS)]
            for t in senders:
                t.start()
            time.sleep(SECONDS)
            stop.set()
            for t in senders:
                t.join(120)
            total = sum(sent) + 1
            deadline = time.monotonic() + 240
            while True:
                w = _writer(base)
                if w["written"] >= total or w["dropped"] or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    assert not errors, errors[:3]
    assert total >= 40, f"only {total} calls sent in {SECONDS:.0f} s: not a sustained load"
    assert w["dropped"] == 0 and w["dropped_spool_full"] == 0, w
    stored = sqlite3.connect(tmp_path / "c.db").execute("SELECT count(*) FROM calls").fetchone()[0]
    assert stored == total, f"{total} calls forwarded, {stored} stored"
    print(f"sustained load: {total} calls sent in {SECONDS:.0f} s beside {HOGS} hogs, {stored} stored")
