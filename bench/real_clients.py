"""Real agent CLIs through the installed daemon, against the simulator (not in CI: it downloads).

Installs pinned versions of Claude Code, Codex, pi, opencode and Gemini CLI from npm into a cache
folder, starts the simulator and the INSTALLED `ctxscope serve` (its anthropic, openai and gemini
upstreams the simulator), and runs each client non-interactively in three modes:

- ``base``: the client's own base-URL setting, with a /s/LABEL route;
- ``run``: `ctxscope run --label LABEL -- CLIENT ...` (whatever the launcher gives it);
- ``proxy``: only HTTPS_PROXY=http://LABEL:x@daemon and the CA variables of `ctxscope ca env`.

Prints per client and mode: exit code, calls recorded, how many of them landed under the label,
their outcomes, tool rounds (calls whose request carries a tool result), and bytes identical both
ways. For that, a recording relay (`bench/http_tap.py`) sits between the daemon and the simulator,
and in ``base`` mode a second one between the client and the daemon: ``same`` counts the calls
whose request body reached the simulator, and whose response body reached the client (``base``) or
the store (``run``, ``proxy``: the client side is TLS or the launcher's own address there), byte for
byte. Every client gets its own HOME/CODEX_HOME in a temporary folder: no file of the user's is
read or written.

    .venv/bin/python bench/real_clients.py [--only codex,pi] [--timeout 90]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from http_tap import Exchange, Tap

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxscope-bench" / "real-clients"
PINNED = {
    "claude": "@anthropic-ai/claude-code@2.1.332",
    "codex": "@openai/codex@0.171.0",
    "pi": "@mariozechner/pi-coding-agent@0.73.1",
    "opencode": "opencode-ai@1.18.33",
    "gemini": "@google/gemini-cli@0.61.0",
}
CTXSCOPE = Path(sys.executable).parent / "ctxscope"
TASK = "list the files in this folder, then run `echo hello` and tell me"
MARKS = (
    b'"tool_result"',
    b'"function_call_output"',
    b'"custom_tool_call_output"',
    b'"role":"tool"',
    b'"functionResponse"',
)  # a tool round
KEYS = {
    "IS_SANDBOX": "1",
    "GEMINI_CLI_TRUST_WORKSPACE": "true",  # claude -p as root; gemini headless
    "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789",
    "OPENAI_API_KEY": "sk-bench-0123456789",
    "CODEX_API_KEY": "sk-bench-0123456789",
    "GEMINI_API_KEY": "bench-0123456789",
}


def install() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    if not (CACHE / "package.json").exists():
        (CACHE / "package.json").write_text('{"private": true}\n')
    wanted = list(PINNED.values())
    installed = json.loads((CACHE / "package.json").read_text()).get("dependencies", {})
    if any(spec.rsplit("@", 1)[0] not in installed for spec in wanted):
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *wanted], cwd=CACHE, check=True
        )
    return CACHE / "node_modules" / ".bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"{what} did not start")


def command(client: str, bin_dir: Path, mode: str, base: str) -> list[str]:
    """The client's non-interactive command line; in ``base`` mode with its own base-URL setting."""
    exe = str(bin_dir / client)
    if client == "claude":
        return [exe, "-p", TASK, "--dangerously-skip-permissions", "--model", "claude-sonnet-4-6"]
    if client == "codex":
        extra = ["-c", f"openai_base_url={json.dumps(base + '/openai/v1')}"] if mode == "base" else []
        return [exe, *extra, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK]
    if client == "pi":
        return [exe, "-p", "--provider", "anthropic", "--model", "claude-sonnet-4-6", TASK]
    if client == "opencode":
        return [exe, "run", "--model", "anthropic/claude-sonnet-4-6", TASK]
    return [exe, "-p", TASK, "--yolo", "--model", "gemini-2.5-flash"]


def home_for(client: str, folder: Path, mode: str, base: str) -> dict[str, str]:
    """A HOME of the client's own, with the settings a base URL needs in ``base`` mode."""
    home = folder / "home"
    home.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "PI_CODING_AGENT_DIR": str(home / ".pi/agent"),
    }
    (home / ".codex").mkdir()
    gemini = home / ".gemini"
    gemini.mkdir()  # Gemini CLI asks how to log in unless told: the selectedType workaround
    (gemini / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    if mode == "base":
        env |= {
            "ANTHROPIC_BASE_URL": f"{base}/anthropic",
            "OPENAI_BASE_URL": f"{base}/openai/v1",
            "GOOGLE_GEMINI_BASE_URL": f"{base}/gemini",
        }
        agent = home / ".pi" / "agent"
        agent.mkdir(parents=True)
        (agent / "models.json").write_text(json.dumps({"providers": {"anthropic": {"baseUrl": f"{base}/anthropic"}}}))
        config = home / ".config" / "opencode"
        config.mkdir(parents=True)
        (config / "opencode.json").write_text(
            json.dumps({"provider": {"anthropic": {"options": {"baseURL": f"{base}/anthropic/v1"}}}})
        )
    return env


def calls_of(db: Path, label: str) -> tuple[list[dict], list[dict]]:
    """Every call, and the label's with their stored bodies and ``tool_round`` (a tool result sent)."""
    from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, list_calls, open_db

    conn = open_db(db)
    try:
        rows = list_calls(conn, limit=100000, newest_first=False)
        mine = [r for r in rows if r["session"] == label]
        for r in mine:
            r["request_raw"] = body = get_request_raw(conn, r["id"]) or b""
            r["response_raw"] = get_response_raw(conn, r["id"]) or b""
            r["tool_round"] = any(mark in body.replace(b'": "', b'":"') for mark in MARKS)
    finally:
        conn.conn.close()
    return rows, mine


def identical(near: list[Exchange] | list[dict], far: list[Exchange]) -> str:
    """How many of ``near`` (client-side exchanges, or stored calls) crossed to ``far`` unchanged both ways.

    A WebSocket carries many calls: a stored call over one is the same when its request is one of the
    messages the upstream received and every event of its stored response one the upstream sent."""
    pairs = {(x.request, x.response) for x in far if not x.websocket}
    sockets = [(x.sent, x.received) for x in far if x.websocket]
    sent = {m for x in far for m in x.sent}
    received = {m for x in far for m in x.received}
    same = 0
    for x in near:
        if isinstance(x, Exchange):
            same += (x.sent, x.received) in sockets if x.websocket else (x.request, x.response) in pairs
        elif x["method"] == "WEBSOCKET":
            events = [line[6:] for line in x["response_raw"].splitlines() if line.startswith(b"data: ")]
            same += x["request_raw"] in sent and bool(events) and all(e in received for e in events)
        else:
            same += (x["request_raw"], x["response_raw"]) in pairs
    return f"{same}/{len(near)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PINNED))
    parser.add_argument("--timeout", type=float, default=90)
    args = parser.parse_args()
    bin_dir = install()
    work = Path(tempfile.mkdtemp(prefix="ctxscope-real-clients-"))
    sim_port, port = free_port(), free_port()
    env0 = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.endswith("_BASE_URL")}
    env0 |= {"CTXSCOPE_HOME": str(work / "ctxscope-home"), **KEYS}
    sim_log, serve_log = open(work / "sim.log", "w"), open(work / "serve.log", "w")  # noqa: SIM115 (live as long as main)
    sim = subprocess.Popen(
        [sys.executable, "-m", "ctxscope.simulator", "--port", str(sim_port)],
        env=env0,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=sim_log,
    )
    assert sim.stdin is not None
    sim.stdin.write(b"bench-token\n")  # its control token; the open pipe keeps it alive
    sim.stdin.flush()
    wait_port(sim_port, sim, "the simulator")
    upstream_tap = Tap(f"http://127.0.0.1:{sim_port}").start()
    db = work / "c.db"
    tapped = f"http://127.0.0.1:{upstream_tap.port}"
    ups = [a for n in ("anthropic", "openai", "gemini") for a in ("--upstream", f"{n}={tapped}")]
    daemon = subprocess.Popen(
        [str(CTXSCOPE), "serve", "--port", str(port), "--db", str(db), *ups],
        env=env0,
        stdout=serve_log,
        stderr=subprocess.STDOUT,
    )
    wait_port(port, daemon, "the daemon")
    url = f"http://127.0.0.1:{port}"
    client_tap = Tap(url).start()
    ca_env = subprocess.run([str(CTXSCOPE), "ca", "env"], env=env0, capture_output=True, text=True, check=True).stdout
    proxy_vars = dict(line.removeprefix("export ").split("=", 1) for line in ca_env.splitlines())
    print(
        f"{'client':9} {'mode':6} {'exit':>4} {'calls':>5} {'labelled':>8} {'ok':>3} {'tools':>5} {'same':>7}  session"
    )
    try:
        for client in args.only.split(","):
            for mode in ("base", "run", "proxy"):
                label = f"{client}-{mode}"
                folder = work / label
                folder.mkdir()
                (folder / "README.md").write_text("a file to list\n")
                base = f"http://127.0.0.1:{client_tap.port}/s/{label}"
                env = env0 | home_for(client, folder, mode, base)
                argv = command(client, bin_dir, mode, base)
                if mode == "run":
                    argv = [str(CTXSCOPE), "run", "--label", label, "--", *argv]
                if mode == "proxy":
                    env |= proxy_vars | {
                        "HTTPS_PROXY": f"http://{label}:x@127.0.0.1:{port}",
                        "https_proxy": f"http://{label}:x@127.0.0.1:{port}",
                        "NODE_USE_ENV_PROXY": "1",
                    }
                before = len(calls_of(db, label)[0]) if db.exists() else 0
                client_mark, upstream_mark = len(client_tap.exchanges), len(upstream_tap.exchanges)
                try:
                    done = subprocess.run(
                        argv,
                        env=env,
                        cwd=folder,
                        capture_output=True,
                        text=True,
                        timeout=args.timeout,
                        stdin=subprocess.DEVNULL,
                    )
                    code: object = done.returncode
                    (folder / "out.txt").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
                except subprocess.TimeoutExpired as exc:
                    code = "T/O"
                    (folder / "out.txt").write_text(str(exc.stdout) + "\n--- stderr\n" + str(exc.stderr))
                time.sleep(1.5)  # the writer stores when traffic pauses
                rows, mine = calls_of(db, label) if db.exists() else ([], [])
                new = len(rows) - before
                ok = sum(r["outcome"] == "ok" for r in mine)
                tools = sum(1 for r in mine if r["tool_round"])
                sessions = sorted({r["session"] for r in rows[before:]})
                far = upstream_tap.exchanges[upstream_mark:]
                near = client_tap.exchanges[client_mark:] if mode == "base" else mine
                same = identical(near, far)
                print(
                    f"{client:9} {mode:6} {code!s:>4} {new:>5} {len(mine):>8} {ok:>3} {tools:>5} {same:>7}  "
                    f"{','.join(sessions)[:60]}",
                    flush=True,
                )
    finally:
        for proc in (daemon, sim):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        print(f"(outputs in {work})")
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(work / "ctxscope-home", ignore_errors=True)


if __name__ == "__main__":
    main()
