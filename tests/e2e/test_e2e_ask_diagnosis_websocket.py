"""`serve --ask-diagnosis` on Codex's path, the Responses API over WebSocket, through the INSTALLED
command to its simulator: each `response.create` after the first goes upstream naming its
conversation's latest answer in ``prompt_cache_options.comparison_response_id`` (a turn that sends
only ``previous_response_id`` and new input, as Codex does, included), so the answers carry the
provider's diagnosis; the stored frame is the client's own and an annotation says what was added
(docs/architecture.md, "Cache verdicts", "Responses over WebSocket")."""

from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import time
from pathlib import Path

from ctxscope.inspector.store import queries
from ctxscope.simulator.control.client import SimulatorControl

from support import sdk_clients
from support.serve_process import CTXSCOPE, running_serve

TOKEN = "ws-diagnosis-" + secrets.token_hex(8)
SYSTEM = "You are a careful coding agent; read before you edit. " * 120
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}


def _turn(conn, event: dict) -> dict:
    """Send one response.create; the terminal event's response."""
    conn.send(event)
    while True:
        frame = json.loads(conn.recv_bytes())
        if frame["type"] in TERMINAL:
            assert frame["type"] == "response.completed", frame
            return frame["response"]


def _stored(db: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 60
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = queries.open_db(db)
            try:
                rows = [queries.get_call(conn, r["id"]) for r in queries.list_calls(conn, newest_first=False)]
            finally:
                conn.conn.close()
            if len(rows) >= n and all(r.get("relation") for r in rows):
                return rows
        time.sleep(0.1)
    raise AssertionError(f"expected {n} analysed calls, found {len(rows)}")


def _show(tmp_path: Path, call_id: str, *args: str) -> bytes:
    return subprocess.run(
        [str(CTXSCOPE), "show", call_id, *args, "--db", str(tmp_path / "c.db")],
        capture_output=True,
        env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=True,
    ).stdout


def _session(base: str) -> tuple[list[dict], list[dict]]:
    """Three Codex-like turns on one socket: (the frames sent, the answers)."""
    client = sdk_clients.OpenAI(api_key="sk-ws-diag-" + secrets.token_hex(8), base_url=base + "/s/ws/u/sim/v1")
    first = [{"role": "user", "content": "Fix the failing test in parser.py."}]
    sent: list[dict] = []
    answers: list[dict] = []
    with client.responses.connect() as conn:
        sent.append({"type": "response.create", "model": "gpt-5.6", "instructions": SYSTEM, "input": first})
        answers.append(_turn(conn, sent[-1]))
        for words in ("Now run it again.", "And commit."):
            sent.append(
                {
                    "type": "response.create",
                    "model": "gpt-5.6",
                    "instructions": SYSTEM,
                    "previous_response_id": answers[-1]["id"],  # Codex sends only the new input
                    "input": [{"role": "user", "content": words}],
                }
            )
            answers.append(_turn(conn, sent[-1]))
    return sent, answers


def test_each_later_turn_on_a_socket_is_asked_for_and_the_capture_keeps_the_clients_frame(tmp_path):
    with running_serve(tmp_path, "--ask-diagnosis", env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (_, base):
        SimulatorControl(base + "/u/sim", TOKEN).set_script([{"text": f"done {i}"} for i in range(3)])
        sent, answers = _session(base)
        rows = _stored(tmp_path / "c.db", 3)
    assert "prompt_cache_diagnostics" not in answers[0] or answers[0]["prompt_cache_diagnostics"] is None
    for before, answer in itertools.pairwise(answers):
        # the simulator saw the field: it answered the comparison with the earlier answer
        assert answer["prompt_cache_diagnostics"]["type"] == "cache_hit", answer.get("prompt_cache_diagnostics")
        assert answer["prompt_cache_options"] is not None, before["id"]

    assert [r["method"] for r in rows] == ["WEBSOCKET"] * 3
    for i, row in enumerate(rows):
        raw = _show(tmp_path, row["id"], "--request-raw")
        assert json.loads(raw) == sent[i] and b"prompt_cache_options" not in raw  # the client's frame
        shown = json.loads(_show(tmp_path, row["id"], "--json"))
        added = [v for k, v in shown["annotations"] or [] if k == "x-ctxscope-asked-diagnosis"]
        if i == 0:
            assert added == [] and shown["cache"]["provider_diagnostics"] is None
        else:
            assert added == [f"prompt_cache_options.comparison_response_id={answers[i - 1]['id']}"]
            diag = shown["cache"]["provider_diagnostics"]
            assert (diag["comparison_id"], diag["status"]) == (answers[i - 1]["id"], "cache_hit")
            assert shown["cache"]["provider_agreement"] == "agree", (shown["relation"], shown["pointer"])


def test_without_the_flag_a_socket_is_relayed_as_it_came(tmp_path):
    with running_serve(tmp_path, env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (_, base):
        SimulatorControl(base + "/u/sim", TOKEN).set_script([{"text": f"done {i}"} for i in range(3)])
        _sent, answers = _session(base)
        rows = _stored(tmp_path / "c.db", 3)
    assert all(a.get("prompt_cache_diagnostics") is None for a in answers)
    assert all(not r["annotations"] for r in rows), [r["annotations"] for r in rows]
