"""The scale bench's sustained load: SDK clients sending as fast as they can beside CPU hogs.

A fresh daemon (the installed ``ctxscope serve``, its built-in simulator as the upstream) takes
``senders`` OpenAI SDK clients for ``seconds`` while ``hogs`` processes spin, a busy machine; then
the bench waits for the writer to store what it was given and counts the calls in the store. Every
call the clients saw answered was forwarded, so each must be stored: sent minus stored is lost.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from scale_measure import Daemon

WORDS = ["parse", "module", "cache", "token", "review", "function", "error", "path", "test", "branch"]


@dataclass(frozen=True)
class LoadResult:
    sent: int
    stored: int
    dropped: int
    client_errors: int

    @property
    def lost(self) -> int:
        return self.sent - self.stored


def sustained(tmp: Path, senders: int, seconds: float, hogs: int) -> LoadResult:
    import openai

    home = tmp / "load-home"
    home.mkdir()
    db = tmp / "load.db"
    daemon = Daemon(home, db)
    sent: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def send(seed: int) -> None:
        rng = random.Random(seed)
        client = openai.OpenAI(base_url=f"{daemon.base}/u/sim/v1", api_key="sk-bench", max_retries=0, timeout=60)
        n = 0
        while not stop.is_set():
            try:
                text = " ".join(rng.choice(WORDS) for _ in range(1500))
                client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": text}])
                n += 1
            except Exception as exc:
                errors.append(repr(exc))
        sent.append(n)

    hog_procs: list[subprocess.Popen] = []
    writer: dict = {}
    try:
        daemon.get("/u/sim/v1/models")  # the simulator's child starts (a call, stored too)
        hog_procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        threads = [threading.Thread(target=send, args=(41 + k,)) for k in range(senders)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    finally:
        for h in hog_procs:
            h.kill()
            h.wait()
        total = sum(sent)
        deadline = time.monotonic() + 600
        while daemon.proc.poll() is None and time.monotonic() < deadline:
            writer = json.loads(daemon.get("/_ctxscope/api/status"))["writer"]
            if (writer["written"] >= total and not writer.get("queued")) or writer["dropped"]:
                break
            time.sleep(0.5)
        time.sleep(1)  # the last batch's commit
        daemon.stop()
    with sqlite3.connect(db) as conn:
        stored = conn.execute("select count(*) from calls where method = 'POST'").fetchone()[0]  # not the warm-up GET
    result = LoadResult(total, stored, int(writer.get("dropped") or 0), len(errors))
    print(
        f"\nsustained load: {senders} senders for {seconds:.0f} s beside {hogs} CPU hogs: {result.sent:,} calls sent, "
        f"{result.stored:,} stored (besides the warm-up call), {result.dropped} dropped, "
        f"{result.client_errors} client errors"
    )
    return result
