"""A fresh `ctxscope serve` holds only what serving needs: the other commands' modules, the store's
queries, the analyses and the pages' views load when a command or a page asks for them
(docs/architecture.md, "Memory")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

# Run in the daemon's own process: the real CLI serves, and a thread reads sys.modules once it
# listens, after the launcher's probe, and after a first request that reads the store.
_PROBE = r"""
import json, os, signal, socket, sys, threading, time, urllib.request
from pathlib import Path

from ctxscope.main import main

port, out, db = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]


def watch():
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/_ctxscope/api"
    seen = {"fresh": sorted(sys.modules)}
    with urllib.request.urlopen(base + "/status?store=0", timeout=60) as answer:
        assert answer.status == 200
    seen["probed"] = sorted(sys.modules)
    with urllib.request.urlopen(base + "/sessions", timeout=60) as answer:
        seen["sessions"] = json.loads(answer.read())
    seen["paged"] = sorted(sys.modules)
    out.write_text(json.dumps(seen))
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=watch, daemon=True).start()
sys.argv = ["ctxscope", "serve", "--port", str(port), "--db", db]
main()
"""

# Loaded only when a command or a page needs them.
NOT_AT_START = (
    "ctxscope.web.api",
    "ctxscope.inspector.store.queries",
    "ctxscope.inspector.pipeline.analyze",
    "ctxscope.inspector.analyses",
    "ctxscope.inspector.pipeline.search_index",
    "ctxscope.inspector.advisor",
    "ctxscope.demo",
    "ctxscope.query_commands",
    "ctxscope.analysis_commands",
    "ctxscope.investigate",
    "ctxscope.agent",
    "tiktoken",
    "sqlite_utils",
    "ctxscope.inspector.store.db",
    "ctxscope.inspector.writer.child",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_a_serve_loads_the_store_side_in_its_reader_child_never_in_itself(tmp_path):
    probe, out = tmp_path / "probe.py", tmp_path / "modules.json"
    probe.write_text(_PROBE)
    env = dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, str(probe), str(_free_port()), str(out), str(tmp_path / "c.db")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    seen = json.loads(out.read_text())
    assert "aiohttp" in seen["fresh"] and "ctxscope.proxy.server" in seen["fresh"]  # it did serve
    assert not _loaded(seen["fresh"], NOT_AT_START), _loaded(seen["fresh"], NOT_AT_START)
    assert not _loaded(seen["probed"], NOT_AT_START), _loaded(seen["probed"], NOT_AT_START)  # `ctxscope run`'s probe
    assert seen["sessions"] == {"sessions": []}
    # the read was answered by the store reader's child (web/reader.py): none of it is in the daemon
    assert not _loaded(seen["paged"], NOT_AT_START), _loaded(seen["paged"], NOT_AT_START)
