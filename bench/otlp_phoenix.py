#!/usr/bin/env python
"""ctxscope's OTLP export against a real backend: Arize Phoenix, installed by this script.

It installs `arize-phoenix` from the package index into its own virtualenv (once; kept in
``--venv``), starts ``phoenix serve`` on loopback, starts ``ctxscope serve --otlp-endpoint`` and
sends calls through the proxy to the built-in simulator with the real openai SDK. Then it asks
Phoenix's REST API for the spans and their attributes; stops Phoenix, sends more calls while it is
down, starts it again on the same working folder, and checks that every call is there exactly
once. The last line reads ``phoenix: N calls, N spans, each once: ok`` (or says what is wrong).

    .venv/bin/python bench/otlp_phoenix.py              # ~2 minutes the first time (install), then ~40 s
    .venv/bin/python bench/otlp_phoenix.py --calls 20
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import openai

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_phoenix(venv: Path) -> Path:
    phoenix = venv / "bin" / "phoenix"
    if not phoenix.exists():
        print(f"installing arize-phoenix into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "arize-phoenix"], check=True)
    return phoenix


def start_phoenix(phoenix: Path, port: int, work: Path, log: Path) -> subprocess.Popen:
    env = dict(
        os.environ,
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_WORKING_DIR=str(work),
    )
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(phoenix), "serve"], stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"phoenix exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/projects", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("phoenix did not answer within 180 s")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_ctxscope(db: Path, endpoint: str, home: Path, log: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, CTXSCOPE_HOME=str(home))
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "ctxscope"), "serve", "--port", "0", "--db", str(db), "--otlp-endpoint", endpoint],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"ctxscope serve did not start:\n{log.read_text()[-3000:]}")


def phoenix_spans(port: int) -> list[dict]:
    spans, cursor = [], None
    while True:
        url = f"http://127.0.0.1:{port}/v1/projects/default/spans?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                page = json.load(r)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no project until the first span arrived
                return []
            raise
        spans += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return spans


def wait_spans(port: int, n: int, timeout: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout
    spans: list[dict] = []
    while time.monotonic() < deadline:
        spans = phoenix_spans(port)
        if len(spans) >= n:
            return spans
        time.sleep(1)
    return spans


def send(base: str, n: int, session: str) -> None:
    with openai.OpenAI(
        api_key="sk-phoenix-check-0123456789",
        base_url=base + "/u/sim/v1",
        max_retries=0,
        default_headers={"x-ctxscope-session": session},
    ) as client:
        messages: list = []
        for i in range(n):
            messages.append({"role": "user", "content": f"step {i}: list the files"})
            answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})


def stored_ids(db: Path) -> list[str]:
    out = subprocess.run(
        [str(VENV_BIN / "ctxscope"), "calls", "--db", str(db), "--json", "--limit", "100000"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [row["id"] for row in json.loads(out.stdout)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=6, help="calls before the outage, and again during it")
    ap.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "ctxscope-phoenix-venv")
    cfg = ap.parse_args()
    phoenix = ensure_phoenix(cfg.venv)
    work = Path(tempfile.mkdtemp(prefix="ctxscope-phoenix-"))
    port = free_port()
    px = start_phoenix(phoenix, port, work / "phoenix", work / "phoenix.log")
    db = work / "captures.db"
    ctx, base = start_ctxscope(db, f"http://127.0.0.1:{port}", work / "home", work / "ctxscope.log")
    try:
        send(base, cfg.calls, "before-outage")
        spans = wait_spans(port, cfg.calls)
        print(f"phoenix up: {len(spans)} spans for {cfg.calls} calls", flush=True)
        stop(px)
        send(base, cfg.calls, "during-outage")
        print(f"phoenix down: {cfg.calls} more calls answered and stored", flush=True)
        px = start_phoenix(phoenix, port, work / "phoenix", work / "phoenix.log")
        ids = stored_ids(db)
        spans = wait_spans(port, len(ids))
        time.sleep(3)  # a late duplicate would show up here
        spans = phoenix_spans(port)
    finally:
        stop(ctx)
        stop(px)
    seen = [s["attributes"].get("ctxscope.call_id") for s in spans]
    once = sorted(seen) == sorted(ids)
    attrs = spans[0]["attributes"] if spans else {}
    keys = (
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.conversation.id",
        "ctxscope.relation",
        "ctxscope.cache.verdict",
        "ctxscope.thread",
    )
    missing = [k for k in keys if k not in attrs]
    sessions = sorted({s["attributes"].get("gen_ai.conversation.id") for s in spans})
    print(f"sessions in phoenix: {sessions}; attributes of one span: { {k: attrs.get(k) for k in keys} }")
    ok = once and not missing and sessions == ["before-outage", "during-outage"]
    print(
        f"phoenix: {len(ids)} calls, {len(spans)} spans, each once: {'ok' if ok else 'MISMATCH'}"
        + (f" (missing attributes {missing})" if missing else "")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
